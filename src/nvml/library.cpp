#include "nvml/library.hpp"

#include <dlfcn.h>

#include <cstdlib>

namespace gpumem::nvml {
namespace {

void* symbol(void* handle, const char* name) { return dlsym(handle, name); }

// First entry point of `names` that the library exports, cast to the declared signature.
template <class Fn>
bool bind(void* handle, Fn& out, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* p = symbol(handle, name)) {
      out = reinterpret_cast<Fn>(p);
      return true;
    }
  }
  out = nullptr;
  return false;
}

}  // namespace

std::shared_ptr<Library> Library::open() {
  const char* env = std::getenv("GPUMEM_NVML_LIBRARY");
  std::string path = (env && *env) ? env : "libnvidia-ml.so.1";
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    throw NvmlUnavailableError("NVML (" + path + ") could not be loaded" + (why ? std::string(": ") + why : "") +
                               "; is the NVIDIA driver installed?");
  }
  std::shared_ptr<Library> lib(new Library(handle, path));
  lib->resolve();
  if (!lib->fn_.init || !lib->fn_.device_count || !lib->fn_.handle_by_index) {
    throw NvmlUnavailableError("NVML (" + path + ") lacks nvmlInit or the device entry points; it is not a usable NVML.");
  }
  // nvmlInit_v2 (~6.5 ms on an H200) plus the first handle per GPU (attach, ~6.5 ms) are the floor of
  // a one-shot query. nvmlInitWithFlags(NO_ATTACH) is no way around it: NVML then reports no GPUs.
  abi::Return rc = lib->fn_.init();
  if (rc != abi::kSuccess) {
    lib->fn_.shutdown = nullptr;  // nothing to shut down
    throw NvmlUnavailableError("NVML could not be initialised: " + lib->error_string(rc) +
                               " (is the NVIDIA driver loaded?).");
  }
  return lib;
}

Library::~Library() {
  // No nvmlShutdown and no dlclose: process exit releases NVML's driver handles, while nvmlShutdown
  // costs ~3 ms (measured on an H200), a seventh of a one-shot query. Open NVML once per process.
}

void Library::resolve() {
  void* h = handle_;
  bind(h, fn_.init, {"nvmlInit_v2", "nvmlInit"});
  bind(h, fn_.shutdown, {"nvmlShutdown"});
  bind(h, fn_.error_string, {"nvmlErrorString"});
  bind(h, fn_.driver_version, {"nvmlSystemGetDriverVersion"});
  bind(h, fn_.cuda_driver_version, {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  bind(h, fn_.process_name, {"nvmlSystemGetProcessName"});
  bind(h, fn_.device_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  bind(h, fn_.handle_by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  bind(h, fn_.name, {"nvmlDeviceGetName"});
  bind(h, fn_.uuid, {"nvmlDeviceGetUUID"});
  bind(h, fn_.pci_info, {"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"});
  bind(h, fn_.minor_number, {"nvmlDeviceGetMinorNumber"});
  bind(h, fn_.memory_v2, {"nvmlDeviceGetMemoryInfo_v2"});
  bind(h, fn_.memory_v1, {"nvmlDeviceGetMemoryInfo"});
  bind(h, fn_.pstate, {"nvmlDeviceGetPerformanceState"});
  bind(h, fn_.temperature, {"nvmlDeviceGetTemperature"});
  bind(h, fn_.field_values, {"nvmlDeviceGetFieldValues"});
  bind(h, fn_.utilization, {"nvmlDeviceGetUtilizationRates"});
  bind(h, fn_.power_usage, {"nvmlDeviceGetPowerUsage"});
  bind(h, fn_.total_energy, {"nvmlDeviceGetTotalEnergyConsumption"});
  bind(h, fn_.power_limit, {"nvmlDeviceGetPowerManagementLimit"});
  bind(h, fn_.clock, {"nvmlDeviceGetClockInfo"});
  bind(h, fn_.max_clock, {"nvmlDeviceGetMaxClockInfo"});
  bind(h, fn_.fan_speed, {"nvmlDeviceGetFanSpeed"});
  bind(h, fn_.persistence_mode, {"nvmlDeviceGetPersistenceMode"});
  bind(h, fn_.compute_mode, {"nvmlDeviceGetComputeMode"});
  bind(h, fn_.ecc_mode, {"nvmlDeviceGetEccMode"});
  bind(h, fn_.ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
  bind(h, fn_.mig_mode, {"nvmlDeviceGetMigMode"});
  bind(h, fn_.cuda_capability, {"nvmlDeviceGetCudaComputeCapability"});
  bind(h, fn_.pcie_throughput, {"nvmlDeviceGetPcieThroughput"});
  bind(h, fn_.vbios_version, {"nvmlDeviceGetVbiosVersion"});
  bind(h, fn_.serial, {"nvmlDeviceGetSerial"});
  bind(h, fn_.display_mode, {"nvmlDeviceGetDisplayMode"});
  bind(h, fn_.display_active, {"nvmlDeviceGetDisplayActive"});
  bind(h, fn_.pcie_gen_current, {"nvmlDeviceGetCurrPcieLinkGeneration"});
  bind(h, fn_.pcie_gen_max, {"nvmlDeviceGetMaxPcieLinkGeneration"});
  bind(h, fn_.pcie_width_current, {"nvmlDeviceGetCurrPcieLinkWidth"});
  bind(h, fn_.pcie_width_max, {"nvmlDeviceGetMaxPcieLinkWidth"});
  bind(h, fn_.enforced_power_limit, {"nvmlDeviceGetEnforcedPowerLimit"});
  bind(h, fn_.pcie_replay, {"nvmlDeviceGetPcieReplayCounter"});
  bind(h, fn_.default_power_limit, {"nvmlDeviceGetPowerManagementDefaultLimit"});
  bind(h, fn_.power_limit_constraints, {"nvmlDeviceGetPowerManagementLimitConstraints"});
  bind(h, fn_.clocks_event_reasons, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  bind(h, fn_.encoder_utilization, {"nvmlDeviceGetEncoderUtilization"});
  bind(h, fn_.decoder_utilization, {"nvmlDeviceGetDecoderUtilization"});
  bind(h, fn_.bar1_memory, {"nvmlDeviceGetBAR1MemoryInfo"});
  bind(h, fn_.cc_protected_memory, {"nvmlDeviceGetConfComputeProtectedMemoryUsage"});
  bind(h, fn_.jpg_utilization, {"nvmlDeviceGetJpgUtilization"});
  bind(h, fn_.ofa_utilization, {"nvmlDeviceGetOfaUtilization"});
  bind(h, fn_.violation_status, {"nvmlDeviceGetViolationStatus"});
  bind(h, fn_.retired_pages, {"nvmlDeviceGetRetiredPages"});
  bind(h, fn_.retired_pages_pending, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  bind(h, fn_.remapped_rows, {"nvmlDeviceGetRemappedRows"});
  bind(h, fn_.process_utilization, {"nvmlDeviceGetProcessUtilization"});
  bind(h, fn_.event_set_create, {"nvmlEventSetCreate"});
  bind(h, fn_.register_events, {"nvmlDeviceRegisterEvents"});
  bind(h, fn_.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  bind(h, fn_.event_set_free, {"nvmlEventSetFree"});

  // Process lists: the newest entry point, with the record layout that entry point writes on this
  // driver. _v3 wrote 32-byte records (usedGpuCcProtectedMemory) only on the drivers that exported
  // nvmlDeviceGetConfComputeMemSizeInfo but not yet nvmlDeviceGetRunningProcessDetailList; before and
  // after that, _v3 records are the 24-byte v2 layout.
  if (bind(h, fn_.compute_processes, {"nvmlDeviceGetComputeRunningProcesses_v3"})) {
    bind(h, fn_.graphics_processes, {"nvmlDeviceGetGraphicsRunningProcesses_v3"});
    bool cc_layout = symbol(h, "nvmlDeviceGetConfComputeMemSizeInfo") &&
                     !symbol(h, "nvmlDeviceGetRunningProcessDetailList");
    fn_.process_api_version = 3;
    fn_.process_record_size = cc_layout ? sizeof(abi::ProcessInfo_v3cc) : sizeof(abi::ProcessInfo_v2);
  } else if (bind(h, fn_.compute_processes, {"nvmlDeviceGetComputeRunningProcesses_v2"})) {
    bind(h, fn_.graphics_processes, {"nvmlDeviceGetGraphicsRunningProcesses_v2"});
    fn_.process_api_version = 2;
    fn_.process_record_size = sizeof(abi::ProcessInfo_v2);
  } else if (bind(h, fn_.compute_processes, {"nvmlDeviceGetComputeRunningProcesses"})) {
    bind(h, fn_.graphics_processes, {"nvmlDeviceGetGraphicsRunningProcesses"});
    fn_.process_api_version = 1;
    fn_.process_record_size = sizeof(abi::ProcessInfo_v1);
  }
}

std::string Library::error_string(abi::Return code) const {
  if (fn_.error_string) {
    if (const char* s = fn_.error_string(code); s && *s) return s;
  }
  return default_error_string(code);
}

const char* default_error_string(abi::Return code) noexcept {
  switch (code) {
    case abi::kSuccess: return "Success";
    case abi::kErrorUninitialized: return "Uninitialized";
    case abi::kErrorInvalidArgument: return "Invalid Argument";
    case abi::kErrorNotSupported: return "Not Supported";
    case abi::kErrorNoPermission: return "Insufficient Permissions";
    case abi::kErrorNotFound: return "Not Found";
    case abi::kErrorInsufficientSize: return "Insufficient Size";
    case abi::kErrorDriverNotLoaded: return "Driver Not Loaded";
    case abi::kErrorTimeout: return "Timeout";
    case abi::kErrorLibraryNotFound: return "NVML Shared Library Not Found";
    case abi::kErrorFunctionNotFound: return "Function Not Found";
    case abi::kErrorGpuIsLost: return "GPU is lost";
    case abi::kErrorArgumentVersionMismatch: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

}  // namespace gpumem::nvml
