// `gpumem dmon`: one fixed-width line per GPU per interval, in nvidia-smi dmon's layout ("# gpu" header
// pair, 6-wide columns, "-" for a value that cannot be read). Contract: metric groups are chosen by
// nvidia-smi's letters with its columns (p pwr gtemp mtemp, u sm mem enc dec [jpg ofa], c mclk pclk,
// v pviol tviol, m fb bar1, e sbecc dbecc pci, t rxpci txpci) plus gpumem's own g (resv free); jpg and
// ofa show where the driver has their entry points, as that driver's nvidia-smi prints them; lines render one
// SampleSet (the sampler measures PCIe on its own thread, so its ~20 ms driver calls never delay a line).
#pragma once
#include <string>
#include <vector>

#include <gpumem/monitor.hpp>

#include "monitor/common.hpp"

namespace gpumem::monitor {

struct DmonColumns {
  bool power = true, util = true, clocks = true, memory = true, ecc = false, pcie = false, gpumem = true;
  bool violations = false;
  bool jpg_ofa = false;  // set from the driver: NVML has nvmlDeviceGetJpgUtilization
};
inline constexpr const char* kDmonDefault = "pucmg";
DmonColumns parse_dmon_metrics(const std::string& letters);  // throws UsageError

std::string dmon_header(const DmonColumns& cols);
// One line per GPU of the sample.
std::string dmon_lines(const SampleSet& sample, const DmonColumns& cols);

}  // namespace gpumem::monitor
