// How CUDA numbers the GPUs that NVML (and nvidia-smi) number by PCI bus id. Contract: cuda_order()
// applies CUDA_DEVICE_ORDER (PCI_BUS_ID, or the default FASTEST_FIRST, which CUDA does not specify:
// we rank by compute capability, then PCI bus id, and say when that is an estimate), then
// CUDA_VISIBLE_DEVICES with CUDA's rules (indices or GPU-UUID prefixes; the first invalid entry hides
// it and every entry after it).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace gpumem::monitor {

struct CudaGpu {
  unsigned nvml_index = 0;
  std::string uuid, bus_id, name;
  std::optional<std::pair<int, int>> capability;
};

struct CudaMapping {
  std::string order;                       // "PCI_BUS_ID" or "FASTEST_FIRST"
  bool order_estimated = false;            // FASTEST_FIRST over GPUs of different kinds
  std::vector<unsigned> enumeration;       // CUDA's enumeration before CUDA_VISIBLE_DEVICES: NVML indices
  std::optional<std::string> visible_env;  // CUDA_VISIBLE_DEVICES as set
  std::vector<unsigned> visible;           // cuda:N -> NVML index, after CUDA_VISIBLE_DEVICES
  std::vector<std::string> notes;          // ignored entries and why
};

CudaMapping cuda_order(const std::vector<CudaGpu>& gpus, const char* device_order_env, const char* visible_env);

}  // namespace gpumem::monitor
