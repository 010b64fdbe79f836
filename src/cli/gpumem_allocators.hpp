// For `gpumem ps` and `gpumem info`: what the gpumem allocators of the listed processes hold (through the control channel),
// beside what NVML charges each process; the difference is memory outside the allocator (CUDA context,
// cuBLAS workspaces, NCCL). Processes without a gpumem control socket are left out, silently.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpumem::cli {

struct NvmlCharge {
  int pid = 0;
  unsigned long long used_bytes = 0;  // NVML's per-process memory, summed over GPUs
};

struct AllocatorRow {
  int pid = 0;
  long long allocated = 0, reserved = 0, peak_allocated = 0;
  unsigned long long nvml_used = 0;
  long long beyond_reserved() const { return (long long)nvml_used - reserved; }
};

std::vector<AllocatorRow> gpumem_allocators(const std::vector<NvmlCharge>& charges);
std::string render_allocators(const std::vector<AllocatorRow>& rows);  // "" when none
nlohmann::ordered_json allocators_json(const std::vector<AllocatorRow>& rows);

}  // namespace gpumem::cli
