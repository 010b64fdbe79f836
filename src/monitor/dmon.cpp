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
  if (c.util) out.insert(out.end(), {{"sm", "%"}, {"mem", "%"}, {"enc", "%"}, {"dec", "%"}});
  if (c.util && c.jpg_ofa) out.insert(out.end(), {{"jpg", "%"}, {"ofa", "%"}});
  if (c.clocks) out.insert(out.end(), {{"mclk", "MHz"}, {"pclk", "MHz"}});
  if (c.violations) out.insert(out.end(), {{"pviol", "%"}, {"tviol", "bool"}});
  if (c.memory) out.insert(out.end(), {{"fb", "MB"}, {"bar1", "MB"}, {"ccpm", "MB"}});
  if (c.ecc) out.insert(out.end(), {{"sbecc", "errs"}, {"dbecc", "errs"}, {"pci", "errs"}});
  if (c.pcie) out.insert(out.end(), {{"rxpci", "MB/s"}, {"txpci", "MB/s"}});
  if (c.gpumem) out.insert(out.end(), {{"resv", "MiB"}, {"free", "MiB"}});
  return out;
}

}  // namespace

DmonColumns parse_dmon_metrics(const std::string& letters) {
  DmonColumns c{false, false, false, false, false, false, false};
  for (char ch : letters) {
    switch (ch) {
      case 'p': c.power = true; break;
      case 'u': c.util = true; break;
      case 'c': c.clocks = true; break;
      case 'm': c.memory = true; break;
      case 'e': c.ecc = true; break;
      case 't': c.pcie = true; break;
      case 'g': c.gpumem = true; break;
      case 'v': c.violations = true; break;
      case ',': break;  // "-s p,u,c" as well as "-s puc"
      default:
        throw UsageError(std::string("unknown dmon metric group '") + ch +
                         "' (p power/temp, u utilization, c clocks, v power/thermal violations, m FB/BAR1 memory, "
                         "e ECC/PCIe errors, t PCIe throughput, g driver-reserved and free memory).");
    }
  }
  if (!(c.power || c.util || c.clocks || c.violations || c.memory || c.ecc || c.pcie || c.gpumem))
    throw UsageError("-s needs at least one metric group (p, u, c, v, m, e, t, g).");
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
      add(line, g.power_mw ? std::to_string((std::uint64_t(*g.power_mw) + 500) / 1000) : "-");  // no 32-bit wrap
      add(line, num(g.temperature));
      add(line, num(g.memory_temperature));
    }
    if (cols.util) {
      add(line, num(g.util_gpu));
      add(line, num(g.util_memory));
      add(line, num(g.encoder_percent));
      add(line, num(g.decoder_percent));
      if (cols.jpg_ofa) {
        add(line, num(g.jpg_percent));
        add(line, num(g.ofa_percent));
      }
    }
    if (cols.clocks) {
      add(line, num(g.clock_memory_mhz));
      add(line, num(g.clock_graphics_mhz));
    }
    if (cols.violations) {
      add(line, num(g.power_violation_percent));
      add(line, g.thermal_violation ? std::to_string(*g.thermal_violation ? 1 : 0) : "-");
    }
    auto mib = [](const std::optional<unsigned long long>& v) { return v ? std::to_string(to_mib(*v)) : "-"; };
    auto count = [](const auto& v) { return v ? std::to_string(*v) : "-"; };
    if (cols.memory) {
      add(line, mib(g.memory_used));
      add(line, mib(g.bar1_used));
      add(line, mib(g.cc_protected_used));
    }
    if (cols.ecc) {
      add(line, count(g.ecc_corrected));
      add(line, count(g.ecc_uncorrected));
      add(line, count(g.pcie_replays));
    }
    if (cols.pcie) {
      add(line, g.pcie_rx_kbps ? std::to_string(*g.pcie_rx_kbps / 1024) : "-");
      add(line, g.pcie_tx_kbps ? std::to_string(*g.pcie_tx_kbps / 1024) : "-");
    }
    if (cols.gpumem) {
      add(line, mib(g.memory_reserved));
      add(line, mib(g.memory_free));
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpumem::monitor
