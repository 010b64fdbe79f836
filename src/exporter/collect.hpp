// One sample of everything /metrics shows, read from NVML, /proc and the device nodes. Contract:
// collect_snapshot() never throws for a failing GPU, field or process: a field NVML does not support
// stays absent, a failed read is counted in health.nvml_errors and leaves its field absent, a GPU
// whose handle is lost is kept with up=false. With nvml == nullptr (NVML missing) only the health
// part is filled. It is the only place the exporter calls NVML, and it runs on the sampler's thread.
#pragma once
#include <string>

#include "exporter/snapshot.hpp"
#include "nvml/nvml.hpp"

namespace gpumem::exporter {

struct CollectOptions {
  std::string dev_dir = "/dev";    // where /dev/nvidiaN live (monitor::device_dir())
  std::string proc_dir = "/proc";  // for the Kubernetes pod identity
  bool processes = true;
};

Snapshot collect_snapshot(const nvml::Nvml* nvml, const CollectOptions& options);

std::string host_name();

}  // namespace gpumem::exporter
