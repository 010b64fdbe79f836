// `gpumem info`: the one-screen health check. Contract: collect_info() reads everything once (driver,
// every GPU's identity, memory, modes, ECC, processes, the CUDA numbering) and derives the warnings
// that matter; a field that cannot be read is absent (null in JSON), never fatal.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "monitor/common.hpp"
#include "monitor/cuda_order.hpp"

namespace gpumem::monitor {

struct InfoGpu {
  unsigned index = 0;
  std::string error;  // set when the GPU cannot be reached at all (e.g. GPU is lost)
  std::optional<std::string> name, uuid, bus_id;
  std::optional<nvml::MemoryInfo> memory;
  std::optional<bool> persistence;
  std::optional<nvml::EnableMode> ecc, mig;
  std::optional<unsigned long long> ecc_uncorrected, ecc_corrected;  // volatile counts
  std::optional<unsigned> compute_mode;
  std::optional<std::pair<int, int>> capability;
  std::optional<std::vector<nvml::GpuProcess>> processes;
  std::vector<std::string> process_names;  // parallel to processes
  std::vector<std::string> process_types;  // "C", "G" or "C+G" (in both lists), as nvidia-smi shows them
  std::vector<bool> process_gone;          // NVML lists it, /proc does not (ps says the same)
};

struct InfoReport {
  std::optional<std::string> driver_version;
  std::optional<int> cuda_driver_version;
  std::string library;
  std::vector<InfoGpu> gpus;
  CudaMapping cuda;               // over every GPU, selected or not
  std::vector<CudaGpu> cuda_gpus;  // what it was made from (their bus ids, for GPUs not in `gpus`)
  std::vector<std::string> warnings;
};

InfoReport collect_info(const nvml::Nvml& nvml, const std::vector<GpuRef>& gpus);
std::string render_info(const InfoReport& report);
nlohmann::ordered_json info_json(const InfoReport& report);

}  // namespace gpumem::monitor
