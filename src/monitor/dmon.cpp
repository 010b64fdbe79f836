#include "monitor/dmon.hpp"

#include <cstdio>

namespace gpumem::monitor {
namespace {

struct Column {
  const char* name;
  const char* unit;
};

void add(std::string& line, const std::string& value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%6s ", value.c_str());
  line += buf;
}

std::string num(const std::optional<unsigned>& v) { return v ? std::to_string(*v) : "-"; }

std::vector<Column> columns(const DmonColumns& c) {
  std::vector<Column> out;
  if (c.power) out.insert(out.end(), {{"pwr", "W"}, {"gtemp", "C"}, {"mtemp", "C"}});
  if (c.util) out.insert(out.end(), {{"sm", "%"}, {"mem", "%"}});
  if (c.clocks) out.insert(out.end(), {{"mclk", "MHz"}, {"pclk", "MHz"}});
  if (c.memory) out.insert(out.end(), {{"fb", "MiB"}, {"resv", "MiB"}, {"free", "MiB"}});
  if (c.pcie) out.insert(out.end(), {{"rxpci", "MB/s"}, {"txpci", "MB/s"}});
  return out;
}

}  // namespace

DmonColumns parse_dmon_metrics(const std::string& letters) {
  DmonColumns c{false, false, false, false, false};
  for (char ch : letters) {
    switch (ch) {
      case 'p': c.power = true; break;
      case 'u': c.util = true; break;
      case 'c': c.clocks = true; break;
      case 'm': c.memory = true; break;
      case 't': c.pcie = true; break;
      default:
        throw UsageError(std::string("unknown dmon metric group '") + ch +
                         "' (p power/temp, u utilization, c clocks, m memory, t PCIe).");
    }
  }
  if (letters.empty()) throw UsageError("-s needs at least one metric group (p, u, c, m, t).");
  return c;
}

std::string dmon_header(const DmonColumns& cols) {
  std::string names = "# gpu ", units = "# Idx ";
  for (const Column& c : columns(cols)) {
    add(names, c.name);
    add(units, c.unit);
  }
  return names + "\n" + units + "\n";
}

std::string dmon_lines(const SampleSet& sample, const DmonColumns& cols) {
  std::string out;
  for (const GpuSample& g : sample.gpus) {
    char idx[16];
    std::snprintf(idx, sizeof idx, "%5u ", g.index);
    std::string line = idx;
    if (cols.power) {
      add(line, g.power_mw ? std::to_string((*g.power_mw + 500) / 1000) : "-");
      add(line, num(g.temperature));
      add(line, num(g.memory_temperature));
    }
    if (cols.util) {
      add(line, num(g.util_gpu));
      add(line, num(g.util_memory));
    }
    if (cols.clocks) {
      add(line, num(g.clock_memory_mhz));
      add(line, num(g.clock_graphics_mhz));
    }
    if (cols.memory) {
      add(line, g.memory_used ? std::to_string(to_mib(*g.memory_used)) : "-");
      add(line, g.memory_reserved ? std::to_string(to_mib(*g.memory_reserved)) : "-");
      add(line, g.memory_free ? std::to_string(to_mib(*g.memory_free)) : "-");
    }
    if (cols.pcie) {
      add(line, g.pcie_rx_kbps ? std::to_string(*g.pcie_rx_kbps / 1024) : "-");
      add(line, g.pcie_tx_kbps ? std::to_string(*g.pcie_tx_kbps / 1024) : "-");
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpumem::monitor
