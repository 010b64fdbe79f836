// Typed, failure-tolerant reads over NVML. Contract: every getter returns a Reading that holds either
// a value or the NVML status that prevented it (Not Supported, GPU is lost, entry point missing...);
// no getter throws, so one failing field never hides the others. Only Nvml::open() throws
// (NvmlUnavailableError) when NVML itself cannot be loaded or initialised.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvml/abi.hpp"
#include "nvml/library.hpp"

namespace gpumem::nvml {

template <class T>
struct Reading {
  std::optional<T> value;
  abi::Return status = abi::kErrorFunctionNotFound;

  static Reading ok(T v) { return Reading{std::move(v), abi::kSuccess}; }
  static Reading fail(abi::Return s) { return Reading{std::nullopt, s == abi::kSuccess ? abi::kErrorUnknown : s}; }
  explicit operator bool() const noexcept { return value.has_value(); }
  const T& operator*() const { return *value; }
  const T* operator->() const { return &*value; }
  bool not_supported() const noexcept {
    return status == abi::kErrorNotSupported || status == abi::kErrorFunctionNotFound;
  }
};

struct MemoryInfo {
  unsigned long long total = 0, free = 0, used = 0;
  std::optional<unsigned long long> reserved;  // only from nvmlDeviceGetMemoryInfo_v2
};

struct Utilization {
  unsigned gpu = 0, memory = 0;
};

struct EnableMode {
  bool current = false, pending = false;
};

struct GpuProcess {
  unsigned pid = 0;
  std::optional<unsigned long long> used_bytes;  // absent when the driver reports "not available"
  std::optional<unsigned> gpu_instance, compute_instance;  // MIG only
  bool graphics = false;  // from the graphics list rather than the compute list
};

struct ProcessUtilization {
  unsigned pid = 0;
  unsigned long long timestamp_us = 0;
  unsigned sm_percent = 0, memory_percent = 0;
};

struct ViolationCounter {  // running counters: a rate needs two readings
  unsigned long long reference_us = 0, violation_ns = 0;
};

struct RemappedRows {
  unsigned correctable = 0, uncorrectable = 0;
  bool pending = false, failure = false;
};

class Nvml {
 public:
  using Device = abi::Device;
  static std::shared_ptr<Nvml> open();  // throws NvmlUnavailableError
  explicit Nvml(std::shared_ptr<Library> lib) : lib_(std::move(lib)) {}

  const Library& library() const noexcept { return *lib_; }
  std::string error_string(abi::Return code) const { return lib_->error_string(code); }

  Reading<std::string> driver_version() const;
  Reading<int> cuda_driver_version() const;  // e.g. 12040
  Reading<std::string> process_name(unsigned pid) const;
  Reading<unsigned> device_count() const;
  Reading<Device> device(unsigned index) const;

  Reading<std::string> name(Device d) const;
  Reading<std::string> uuid(Device d) const;
  Reading<std::string> pci_bus_id(Device d) const;  // "00000000:18:00.0"
  Reading<unsigned> minor_number(Device d) const;   // N of /dev/nvidiaN
  Reading<MemoryInfo> memory(Device d) const;
  Reading<unsigned> pstate(Device d) const;
  Reading<unsigned> temperature(Device d) const;
  Reading<unsigned> memory_temperature(Device d) const;
  Reading<Utilization> utilization(Device d) const;
  Reading<unsigned> power_mw(Device d) const;
  Reading<unsigned> power_limit_mw(Device d) const;
  Reading<unsigned long long> total_energy_mj(Device d) const;  // since the driver loaded (Volta+)
  Reading<unsigned> clock_mhz(Device d, unsigned clock_type) const;
  Reading<unsigned> max_clock_mhz(Device d, unsigned clock_type) const;
  Reading<unsigned> fan_percent(Device d) const;
  Reading<bool> persistence_mode(Device d) const;
  Reading<unsigned> compute_mode(Device d) const;
  Reading<EnableMode> ecc_mode(Device d) const;
  Reading<unsigned long long> ecc_errors(Device d, unsigned error_type, unsigned counter_type) const;
  Reading<EnableMode> mig_mode(Device d) const;
  Reading<std::pair<int, int>> cuda_capability(Device d) const;
  Reading<unsigned> pcie_kbps(Device d, unsigned counter) const;  // blocks ~20 ms: see PcieSampler
  Reading<std::string> vbios_version(Device d) const;
  Reading<std::string> serial(Device d) const;
  // Plain unsigned properties: which entry point of Functions answers them.
  Reading<unsigned> uint_property(Device d, abi::Return (*Functions::*fn)(Device, unsigned*)) const;
  Reading<std::pair<unsigned, unsigned>> power_limit_constraints_mw(Device d) const;  // min, max
  Reading<unsigned long long> clocks_event_reasons(Device d) const;  // nvmlClocksEventReason* bits
  Reading<unsigned> encoder_percent(Device d) const;
  Reading<unsigned> decoder_percent(Device d) const;
  Reading<MemoryInfo> bar1_memory(Device d) const;
  // Memory protected for confidential computing (nvidia-smi dmon's ccpm; 0 with CC off).
  Reading<MemoryInfo> cc_protected_memory(Device d) const;
  Reading<unsigned> jpg_percent(Device d) const;
  Reading<unsigned> ofa_percent(Device d) const;
  Reading<ViolationCounter> violation(Device d, unsigned perf_policy) const;
  Reading<unsigned> retired_pages(Device d, unsigned cause) const;  // how many pages, not their addresses
  Reading<bool> retired_pages_pending(Device d) const;
  Reading<RemappedRows> remapped_rows(Device d) const;
  // The newest sample per process taken after `since_us` (CPU microseconds; 0: all the driver keeps).
  // Processes without a sample in that window are absent (NVML keeps only non-idle ones).
  Reading<std::vector<ProcessUtilization>> process_utilization(Device d, unsigned long long since_us) const;
  Reading<std::vector<GpuProcess>> compute_processes(Device d) const;
  Reading<std::vector<GpuProcess>> graphics_processes(Device d) const;

 private:
  Reading<std::vector<GpuProcess>> processes(Device d, abi::Return (*fn)(Device, unsigned*, void*), bool graphics) const;
  std::shared_ptr<Library> lib_;
};

// nvidia-smi's names for an NVML compute mode ("Default", "Exclusive_Process", ...).
const char* compute_mode_name(unsigned mode) noexcept;

}  // namespace gpumem::nvml
