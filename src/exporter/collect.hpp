// One sample of everything /metrics shows: the monitor Sampler's GPU sample (the one NVML reader, shared
// with top and dmon), then /proc (user, command, container, pod), the holders of /dev/nvidiaN (ghosts
// without an NVML context) and the control channel (gpumem allocators). Contract: collect() never
// throws: NVML missing leaves only the health part filled (and NVML is tried again next sample), a GPU
// that fails keeps its identity with up=false, a field it does not report stays absent, a process that
// exits mid-sample is a ghost or drops out, a gpumem process that does not answer is counted in
// health.control_errors. It runs on the exporter's sampling thread only.
#pragma once
#include <gpumem/monitor.hpp>

#include <chrono>
#include <optional>
#include <string>

#include "control/client.hpp"
#include "exporter/snapshot.hpp"
#include "monitor/procfs.hpp"

namespace gpumem::exporter {

struct CollectOptions {
  std::string dev_dir = "/dev";    // where /dev/nvidiaN live (monitor::device_dir())
  std::string proc_dir = "/proc";  // for the Kubernetes pod identity
  bool processes = true;
  bool control = true;  // ask gpumem processes for their allocator stats
  std::chrono::milliseconds control_timeout{300};
  std::chrono::seconds holder_scan_every{5};  // walking every /proc/PID/fd is the costly part
};

class Collector {
 public:
  explicit Collector(CollectOptions options) : options_(std::move(options)) {}
  Snapshot collect();

 private:
  CollectOptions options_;
  std::optional<monitor::Sampler> sampler_;
  monitor::HolderScan holders_;
  std::chrono::steady_clock::time_point holders_at_{};
};

// The exporter's snapshot from one monitor sample and a device-node scan (reads /proc for names).
Snapshot snapshot_from(const monitor::SampleSet& sample, const monitor::HolderScan& holders, const CollectOptions& options);

// The GPU (NVML index) a gpumem process's device report is about, over a snapshot whose GPUs and
// processes are filled: by the device key's CUDA_VISIBLE_DEVICES entry (UUID, prefix or CUDA index),
// else the only GPU NVML shows the process on, else the report's device number.
unsigned gpu_of_report(const control::DeviceReport& d, int pid, const Snapshot& s);

// Adds the gpumem allocators (control channel) to a snapshot whose GPUs and processes are filled.
void add_allocators(Snapshot& snapshot, const CollectOptions& options);

std::string host_name();

}  // namespace gpumem::exporter
