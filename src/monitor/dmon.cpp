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

template <class T>
std::string num(const nvml::Reading<T>& r) {
  return r ? std::to_string(*r) : "-";
}

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

std::string dmon_lines(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus, const DmonColumns& cols,
                       const nvml::PcieSampler* pcie) {
  std::string out;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const GpuRef& g = gpus[i];
    char idx[16];
    std::snprintf(idx, sizeof idx, "%5u ", g.index);
    std::string line = idx;
    auto d = g.device;
    if (cols.power) {
      auto p = d ? nvml.power_mw(d) : nvml::Reading<unsigned>::fail(g.status);
      add(line, p ? std::to_string((*p + 500) / 1000) : "-");
      add(line, d ? num(nvml.temperature(d)) : "-");
      add(line, d ? num(nvml.memory_temperature(d)) : "-");
    }
    if (cols.util) {
      auto u = d ? nvml.utilization(d) : nvml::Reading<nvml::Utilization>::fail(g.status);
      add(line, u ? std::to_string(u->gpu) : "-");
      add(line, u ? std::to_string(u->memory) : "-");
    }
    if (cols.clocks) {
      add(line, d ? num(nvml.clock_mhz(d, nvml::abi::kClockMem)) : "-");
      add(line, d ? num(nvml.clock_mhz(d, nvml::abi::kClockGraphics)) : "-");
    }
    if (cols.memory) {
      auto m = d ? nvml.memory(d) : nvml::Reading<nvml::MemoryInfo>::fail(g.status);
      add(line, m ? std::to_string(to_mib(m->used)) : "-");
      add(line, m && m->reserved ? std::to_string(to_mib(*m->reserved)) : "-");
      add(line, m ? std::to_string(to_mib(m->free)) : "-");
    }
    if (cols.pcie) {
      nvml::PcieRate r = pcie ? pcie->latest(i) : nvml::PcieRate{};
      add(line, r.rx_kbps ? std::to_string(*r.rx_kbps / 1024) : "-");
      add(line, r.tx_kbps ? std::to_string(*r.tx_kbps / 1024) : "-");
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace gpumem::monitor
