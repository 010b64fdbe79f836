// What the exporter serves, as plain data: one Snapshot per background sample. Contract: the sampler
// fills it, the renderer only reads it; an absent optional is a field the GPU or driver does not
// report, and is left out of /metrics rather than shown as zero (dcgm-exporter's rule).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpumem::exporter {

struct GpuMetrics {
  unsigned index = 0;
  std::string uuid, pci_bus_id, model_name;
  std::optional<unsigned> minor;  // N of /dev/nvidiaN: the `device` label
  bool up = true;                 // false: the handle or every read failed (GPU lost)
  // dcgm-exporter's fields, in its units.
  std::optional<unsigned long long> fb_total_bytes, fb_used_bytes, fb_free_bytes, fb_reserved_bytes;
  std::optional<unsigned> gpu_util_percent, mem_copy_util_percent;
  std::optional<unsigned> sm_clock_mhz, mem_clock_mhz;
  std::optional<unsigned> gpu_temp_c, memory_temp_c;
  std::optional<double> power_watts;
  std::optional<unsigned long long> total_energy_mj;
  std::optional<unsigned long long> pcie_replays;
  std::optional<unsigned long long> last_xid;  // 0 until an XID arrives; absent without XID events
  std::optional<unsigned long long> remapped_rows_correctable, remapped_rows_uncorrectable;
  std::optional<unsigned long long> row_remap_failure;  // 1: the remapper ran out of spare rows
};

enum class ProcessKind {
  kContext,    // NVML lists it on this GPU and the PID exists
  kExited,     // NVML lists it but the PID is gone: memory held by a ghost
  kNoContext,  // holds /dev/nvidiaN without an NVML context on that GPU
};

struct ProcessMetrics {
  unsigned gpu = 0;
  int pid = 0;
  ProcessKind kind = ProcessKind::kContext;
  std::optional<unsigned long long> used_bytes;
  std::string user, command;          // command: the kernel's short name (comm)
  std::string container, pod, namespace_, pod_uid;  // empty outside containers / Kubernetes
};

// One gpumem allocator (one process, one device), from the control channel.
struct AllocatorMetrics {
  unsigned gpu = 0;
  int pid = 0;
  std::string command;
  long long allocated_bytes = 0, reserved_bytes = 0, peak_allocated_bytes = 0, requested_bytes = 0;
  std::optional<long long> largest_free_bytes, limit_bytes;
  long long ooms = 0, alloc_retries = 0;
  bool on_gpu = true;  // a CUDA backend's; host and sim allocators hold no GPU memory (not in the GPU's split)
};

struct SampleHealth {
  bool nvml_up = false;
  std::string nvml_error;                       // why NVML is down (one sentence)
  unsigned long long nvml_errors = 0;           // failed NVML reads in this sample (not "not supported")
  unsigned unreadable_processes = 0;            // /proc/PID/fd we may not read (other users)
  unsigned long long control_errors = 0;        // gpumem processes whose control channel failed
  double duration_seconds = 0;                  // how long this sample took
  double taken_at_unix = 0;                     // wall-clock time of the sample
};

struct Snapshot {
  std::string hostname;
  std::vector<GpuMetrics> gpus;
  std::vector<ProcessMetrics> processes;
  std::vector<AllocatorMetrics> allocators;
  SampleHealth health;
};

}  // namespace gpumem::exporter
