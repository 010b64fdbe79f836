// `gpumem dmon`: one fixed-width line per GPU per interval, in nvidia-smi dmon's layout ("# gpu" header
// pair, 6-wide columns, "-" for a value that cannot be read). Contract: metric groups are chosen by
// letters (p power/temperature, u utilization, c clocks, m memory, t PCIe); the lines render one
// SampleSet (the sampler measures PCIe on its own thread, so its ~20 ms driver calls never delay a line).
#pragma once
#include <string>
#include <vector>

#include <gpumem/monitor.hpp>

#include "monitor/common.hpp"

namespace gpumem::monitor {

struct DmonColumns {
  bool power = true, util = true, clocks = true, memory = true, pcie = false;
};
DmonColumns parse_dmon_metrics(const std::string& letters);  // throws UsageError

std::string dmon_header(const DmonColumns& cols);
// One line per GPU of the sample.
std::string dmon_lines(const SampleSet& sample, const DmonColumns& cols);

}  // namespace gpumem::monitor
