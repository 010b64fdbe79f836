// Loads NVML at run time (dlopen) and resolves the entry points gpumem calls, choosing the newest
// version each driver offers. Contract: Library::open() either returns an initialised NVML (nvmlInit
// done; meant to be called once per process: NVML stays initialised until exit, because nvmlShutdown
// costs milliseconds) or throws NvmlUnavailableError with one sentence saying why.
// Missing optional entry points are null; callers report those fields as not supported.
// GPUMEM_NVML_LIBRARY names another library to load (the tests load a scripted double this way).
#pragma once
#include <gpumem/errors.hpp>

#include <memory>
#include <string>

#include "nvml/abi.hpp"

namespace gpumem::nvml {

class NvmlUnavailableError : public BackendUnavailableError {
 public:
  using BackendUnavailableError::BackendUnavailableError;
};

struct Functions {
  using Device = abi::Device;
  using Return = abi::Return;
  Return (*init)() = nullptr;
  Return (*shutdown)() = nullptr;
  const char* (*error_string)(Return) = nullptr;
  Return (*driver_version)(char*, unsigned) = nullptr;
  Return (*cuda_driver_version)(int*) = nullptr;
  Return (*process_name)(unsigned, char*, unsigned) = nullptr;
  Return (*device_count)(unsigned*) = nullptr;
  Return (*handle_by_index)(unsigned, Device*) = nullptr;
  Return (*name)(Device, char*, unsigned) = nullptr;
  Return (*uuid)(Device, char*, unsigned) = nullptr;
  Return (*pci_info)(Device, abi::PciInfo*) = nullptr;
  Return (*minor_number)(Device, unsigned*) = nullptr;
  Return (*memory_v2)(Device, abi::Memory_v2*) = nullptr;
  Return (*memory_v1)(Device, abi::Memory_v1*) = nullptr;
  Return (*pstate)(Device, unsigned*) = nullptr;
  Return (*temperature)(Device, unsigned, unsigned*) = nullptr;
  Return (*field_values)(Device, int, abi::FieldValue*) = nullptr;
  Return (*utilization)(Device, abi::Utilization*) = nullptr;
  Return (*power_usage)(Device, unsigned*) = nullptr;
  Return (*power_limit)(Device, unsigned*) = nullptr;
  Return (*total_energy)(Device, unsigned long long*) = nullptr;
  Return (*clock)(Device, unsigned, unsigned*) = nullptr;
  Return (*max_clock)(Device, unsigned, unsigned*) = nullptr;
  Return (*fan_speed)(Device, unsigned*) = nullptr;
  Return (*persistence_mode)(Device, unsigned*) = nullptr;
  Return (*compute_mode)(Device, unsigned*) = nullptr;
  Return (*ecc_mode)(Device, unsigned*, unsigned*) = nullptr;
  Return (*ecc_errors)(Device, unsigned, unsigned, unsigned long long*) = nullptr;
  Return (*mig_mode)(Device, unsigned*, unsigned*) = nullptr;
  Return (*cuda_capability)(Device, int*, int*) = nullptr;
  Return (*pcie_throughput)(Device, unsigned, unsigned*) = nullptr;
  // nvidia-smi's remaining --query-gpu fields and dmon columns.
  Return (*vbios_version)(Device, char*, unsigned) = nullptr;
  Return (*serial)(Device, char*, unsigned) = nullptr;
  Return (*display_mode)(Device, unsigned*) = nullptr;
  Return (*display_active)(Device, unsigned*) = nullptr;
  Return (*pcie_gen_current)(Device, unsigned*) = nullptr;
  Return (*pcie_gen_max)(Device, unsigned*) = nullptr;
  Return (*pcie_width_current)(Device, unsigned*) = nullptr;
  Return (*pcie_width_max)(Device, unsigned*) = nullptr;
  Return (*enforced_power_limit)(Device, unsigned*) = nullptr;
  Return (*pcie_replay)(Device, unsigned*) = nullptr;
  Return (*default_power_limit)(Device, unsigned*) = nullptr;
  Return (*power_limit_constraints)(Device, unsigned*, unsigned*) = nullptr;
  Return (*clocks_event_reasons)(Device, unsigned long long*) = nullptr;
  Return (*encoder_utilization)(Device, unsigned*, unsigned*) = nullptr;
  Return (*decoder_utilization)(Device, unsigned*, unsigned*) = nullptr;
  Return (*bar1_memory)(Device, abi::BAR1Memory*) = nullptr;
  Return (*cc_protected_memory)(Device, abi::Memory_v1*) = nullptr;  // confidential computing
  Return (*jpg_utilization)(Device, unsigned*, unsigned*) = nullptr;
  Return (*ofa_utilization)(Device, unsigned*, unsigned*) = nullptr;
  Return (*violation_status)(Device, unsigned, abi::ViolationTime*) = nullptr;
  Return (*retired_pages)(Device, unsigned, unsigned*, unsigned long long*) = nullptr;
  Return (*retired_pages_pending)(Device, unsigned*) = nullptr;
  Return (*remapped_rows)(Device, unsigned*, unsigned*, unsigned*, unsigned*) = nullptr;
  Return (*process_utilization)(Device, abi::ProcessUtilizationSample*, unsigned*, unsigned long long) = nullptr;
  // XID events: a set, devices registered into it, a wait that returns at once with timeout 0.
  Return (*event_set_create)(abi::EventSet*) = nullptr;
  Return (*register_events)(Device, unsigned long long, abi::EventSet) = nullptr;
  Return (*event_set_wait)(abi::EventSet, abi::EventData*, unsigned) = nullptr;
  Return (*event_set_free)(abi::EventSet) = nullptr;
  // Process lists take a record array whose stride is process_record_size (16, 24 or 32 bytes).
  Return (*compute_processes)(Device, unsigned*, void*) = nullptr;
  Return (*graphics_processes)(Device, unsigned*, void*) = nullptr;
  unsigned process_record_size = 0;
  int process_api_version = 0;  // 1, 2 or 3: which entry point was found
};

class Library {
 public:
  static std::shared_ptr<Library> open();
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const Functions& fn() const noexcept { return fn_; }
  const std::string& path() const noexcept { return path_; }
  std::string error_string(abi::Return code) const;

 private:
  Library(void* handle, std::string path) : handle_(handle), path_(std::move(path)) {}
  void resolve();
  void* handle_;
  std::string path_;
  Functions fn_;
};

// Text for an NVML return code when the library cannot give one ("Not Supported", "GPU is lost").
const char* default_error_string(abi::Return code) noexcept;

}  // namespace gpumem::nvml
