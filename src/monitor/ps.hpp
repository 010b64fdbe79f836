// `gpumem ps`: every process using a GPU. Contract: collect_ps() merges three sources that disagree on
// purpose: NVML's compute and graphics lists, /proc (user, command line, container, whether the PID
// still exists) and the holders of the per-GPU device nodes, so it can show what nobody else does:
// processes that hold /dev/nvidiaN without an NVML context, NVML entries whose PID is gone, and the
// device's used memory that no process accounts for. Nothing in it throws for a failing GPU or PID.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "monitor/common.hpp"
#include "monitor/procfs.hpp"

namespace gpumem::monitor {

enum class PsKind {
  kContext,    // NVML lists it and the PID exists
  kNoContext,  // holds a device node, NVML does not list it on that GPU
  kGone,       // NVML lists it but no such PID exists (here)
};

struct PsEntry {
  int pid = 0;
  unsigned gpu = 0;
  PsKind kind = PsKind::kContext;
  std::string type;  // "C", "G", "C+G", or "-" for a device-node holder
  std::optional<unsigned long long> used_bytes;
  std::optional<ProcInfo> proc;
  std::vector<std::string> nodes;  // device nodes it holds for this GPU
};

struct PsGpu {
  unsigned index = 0;
  std::string name, uuid;
  std::optional<unsigned long long> used_bytes;  // device "used" (excludes reserved on NVML v2)
  unsigned long long process_bytes = 0;          // sum over listed processes
  std::string error;                             // why the process list or memory is missing
};

struct PsReport {
  std::vector<PsGpu> gpus;
  std::vector<PsEntry> entries;
  unsigned unreadable_fd_dirs = 0;
};

PsReport collect_ps(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus, const std::string& dev_dir);
std::string render_ps(const PsReport& report);
nlohmann::ordered_json ps_json(const PsReport& report);

// Driver daemons that hold device nodes by design (not worth a warning).
bool is_driver_daemon(const ProcInfo& p);

}  // namespace gpumem::monitor
