#include "nvml/nvml.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace gpumem::nvml {
namespace {

template <class T, class Fn, class... Args>
Reading<T> read_scalar(Fn fn, Args... args) {
  if (!fn) return Reading<T>::fail(abi::kErrorFunctionNotFound);
  T out{};
  abi::Return rc = fn(args..., &out);
  return rc == abi::kSuccess ? Reading<T>::ok(out) : Reading<T>::fail(rc);
}

template <class Fn, class... Args>
Reading<std::string> read_string(Fn fn, Args... args) {
  if (!fn) return Reading<std::string>::fail(abi::kErrorFunctionNotFound);
  char buf[abi::kStringBufferSize + 1] = {};
  abi::Return rc = fn(args..., buf, abi::kStringBufferSize);
  if (rc != abi::kSuccess) return Reading<std::string>::fail(rc);
  return Reading<std::string>::ok(std::string(buf, strnlen(buf, abi::kStringBufferSize)));
}

}  // namespace

std::shared_ptr<Nvml> Nvml::open() { return std::make_shared<Nvml>(Library::open()); }

Reading<std::string> Nvml::driver_version() const { return read_string(lib_->fn().driver_version); }

Reading<int> Nvml::cuda_driver_version() const { return read_scalar<int>(lib_->fn().cuda_driver_version); }

Reading<std::string> Nvml::process_name(unsigned pid) const { return read_string(lib_->fn().process_name, pid); }

Reading<unsigned> Nvml::device_count() const { return read_scalar<unsigned>(lib_->fn().device_count); }

Reading<Nvml::Device> Nvml::device(unsigned index) const {
  return read_scalar<Device>(lib_->fn().handle_by_index, index);
}

Reading<std::string> Nvml::name(Device d) const { return read_string(lib_->fn().name, d); }

Reading<std::string> Nvml::uuid(Device d) const { return read_string(lib_->fn().uuid, d); }

Reading<std::string> Nvml::pci_bus_id(Device d) const {
  auto fn = lib_->fn().pci_info;
  if (!fn) return Reading<std::string>::fail(abi::kErrorFunctionNotFound);
  abi::PciInfo info{};
  abi::Return rc = fn(d, &info);
  if (rc != abi::kSuccess) return Reading<std::string>::fail(rc);
  // Every layout has domain/bus/device at the same offsets; format them as nvidia-smi does.
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.0", info.domain, info.bus, info.device);
  return Reading<std::string>::ok(buf);
}

Reading<unsigned> Nvml::minor_number(Device d) const { return read_scalar<unsigned>(lib_->fn().minor_number, d); }

Reading<MemoryInfo> Nvml::memory(Device d) const {
  const Functions& f = lib_->fn();
  abi::Return rc = abi::kErrorFunctionNotFound;
  if (f.memory_v2) {
    abi::Memory_v2 m{};
    m.version = abi::kMemory_v2_version;
    rc = f.memory_v2(d, &m);
    if (rc == abi::kSuccess) return Reading<MemoryInfo>::ok(MemoryInfo{m.total, m.free, m.used, m.reserved});
    // An older driver may export _v2 yet reject this struct version: fall back to v1 below.
    if (rc != abi::kErrorArgumentVersionMismatch && rc != abi::kErrorNotSupported &&
        rc != abi::kErrorFunctionNotFound && rc != abi::kErrorInvalidArgument)
      return Reading<MemoryInfo>::fail(rc);
  }
  if (f.memory_v1) {
    abi::Memory_v1 m{};
    rc = f.memory_v1(d, &m);
    if (rc == abi::kSuccess) return Reading<MemoryInfo>::ok(MemoryInfo{m.total, m.free, m.used, std::nullopt});
  }
  return Reading<MemoryInfo>::fail(rc);
}

Reading<unsigned> Nvml::pstate(Device d) const {
  auto r = read_scalar<unsigned>(lib_->fn().pstate, d);
  if (r && *r == abi::kPstateUnknown) return Reading<unsigned>::fail(abi::kErrorNotSupported);
  return r;
}

Reading<unsigned> Nvml::temperature(Device d) const {
  return read_scalar<unsigned>(lib_->fn().temperature, d, abi::kTemperatureGpu);
}

Reading<unsigned> Nvml::memory_temperature(Device d) const {
  auto fn = lib_->fn().field_values;
  if (!fn) return Reading<unsigned>::fail(abi::kErrorFunctionNotFound);
  abi::FieldValue v{};
  v.fieldId = abi::kFieldMemoryTemp;
  abi::Return rc = fn(d, 1, &v);
  if (rc != abi::kSuccess) return Reading<unsigned>::fail(rc);
  if (v.nvmlReturn != abi::kSuccess) return Reading<unsigned>::fail(v.nvmlReturn);
  if (v.valueType == abi::kValueTypeUnsignedLongLong) return Reading<unsigned>::ok(static_cast<unsigned>(v.value.ullVal));
  return Reading<unsigned>::ok(v.value.uiVal);
}

Reading<Utilization> Nvml::utilization(Device d) const {
  auto r = read_scalar<abi::Utilization>(lib_->fn().utilization, d);
  if (!r) return Reading<Utilization>::fail(r.status);
  return Reading<Utilization>::ok(Utilization{r->gpu, r->memory});
}

Reading<unsigned> Nvml::power_mw(Device d) const { return read_scalar<unsigned>(lib_->fn().power_usage, d); }

Reading<unsigned> Nvml::power_limit_mw(Device d) const { return read_scalar<unsigned>(lib_->fn().power_limit, d); }

Reading<unsigned long long> Nvml::total_energy_mj(Device d) const {
  return read_scalar<unsigned long long>(lib_->fn().total_energy, d);
}

Reading<unsigned> Nvml::clock_mhz(Device d, unsigned type) const {
  return read_scalar<unsigned>(lib_->fn().clock, d, type);
}

Reading<unsigned> Nvml::max_clock_mhz(Device d, unsigned type) const {
  return read_scalar<unsigned>(lib_->fn().max_clock, d, type);
}

Reading<unsigned> Nvml::fan_percent(Device d) const { return read_scalar<unsigned>(lib_->fn().fan_speed, d); }

Reading<bool> Nvml::persistence_mode(Device d) const {
  auto r = read_scalar<unsigned>(lib_->fn().persistence_mode, d);
  return r ? Reading<bool>::ok(*r != 0) : Reading<bool>::fail(r.status);
}

Reading<unsigned> Nvml::compute_mode(Device d) const { return read_scalar<unsigned>(lib_->fn().compute_mode, d); }

Reading<EnableMode> Nvml::ecc_mode(Device d) const {
  auto fn = lib_->fn().ecc_mode;
  if (!fn) return Reading<EnableMode>::fail(abi::kErrorFunctionNotFound);
  unsigned cur = 0, pend = 0;
  abi::Return rc = fn(d, &cur, &pend);
  if (rc != abi::kSuccess) return Reading<EnableMode>::fail(rc);
  return Reading<EnableMode>::ok(EnableMode{cur != 0, pend != 0});
}

Reading<unsigned long long> Nvml::ecc_errors(Device d, unsigned error_type, unsigned counter_type) const {
  return read_scalar<unsigned long long>(lib_->fn().ecc_errors, d, error_type, counter_type);
}

Reading<EnableMode> Nvml::mig_mode(Device d) const {
  auto fn = lib_->fn().mig_mode;
  if (!fn) return Reading<EnableMode>::fail(abi::kErrorFunctionNotFound);
  unsigned cur = 0, pend = 0;
  abi::Return rc = fn(d, &cur, &pend);
  if (rc != abi::kSuccess) return Reading<EnableMode>::fail(rc);
  return Reading<EnableMode>::ok(EnableMode{cur != 0, pend != 0});
}

Reading<std::pair<int, int>> Nvml::cuda_capability(Device d) const {
  auto fn = lib_->fn().cuda_capability;
  if (!fn) return Reading<std::pair<int, int>>::fail(abi::kErrorFunctionNotFound);
  int major = 0, minor = 0;
  abi::Return rc = fn(d, &major, &minor);
  if (rc != abi::kSuccess) return Reading<std::pair<int, int>>::fail(rc);
  return Reading<std::pair<int, int>>::ok({major, minor});
}

Reading<unsigned> Nvml::pcie_kbps(Device d, unsigned counter) const {
  return read_scalar<unsigned>(lib_->fn().pcie_throughput, d, counter);
}

Reading<std::string> Nvml::vbios_version(Device d) const { return read_string(lib_->fn().vbios_version, d); }
Reading<std::string> Nvml::serial(Device d) const { return read_string(lib_->fn().serial, d); }

Reading<unsigned> Nvml::uint_property(Device d, abi::Return (*Functions::*fn)(Device, unsigned*)) const {
  return read_scalar<unsigned>(lib_->fn().*fn, d);
}

Reading<std::pair<unsigned, unsigned>> Nvml::power_limit_constraints_mw(Device d) const {
  using R = Reading<std::pair<unsigned, unsigned>>;
  auto fn = lib_->fn().power_limit_constraints;
  if (!fn) return R::fail(abi::kErrorFunctionNotFound);
  unsigned lo = 0, hi = 0;
  abi::Return rc = fn(d, &lo, &hi);
  return rc == abi::kSuccess ? R::ok({lo, hi}) : R::fail(rc);
}

Reading<unsigned long long> Nvml::clocks_event_reasons(Device d) const {
  return read_scalar<unsigned long long>(lib_->fn().clocks_event_reasons, d);
}

namespace {
Reading<unsigned> codec_percent(abi::Return (*fn)(abi::Device, unsigned*, unsigned*), abi::Device d) {
  if (!fn) return Reading<unsigned>::fail(abi::kErrorFunctionNotFound);
  unsigned util = 0, period_us = 0;
  abi::Return rc = fn(d, &util, &period_us);
  return rc == abi::kSuccess ? Reading<unsigned>::ok(util) : Reading<unsigned>::fail(rc);
}
}  // namespace

Reading<unsigned> Nvml::encoder_percent(Device d) const { return codec_percent(lib_->fn().encoder_utilization, d); }
Reading<unsigned> Nvml::decoder_percent(Device d) const { return codec_percent(lib_->fn().decoder_utilization, d); }

Reading<unsigned> Nvml::jpg_percent(Device d) const { return codec_percent(lib_->fn().jpg_utilization, d); }
Reading<unsigned> Nvml::ofa_percent(Device d) const { return codec_percent(lib_->fn().ofa_utilization, d); }

Reading<ViolationCounter> Nvml::violation(Device d, unsigned perf_policy) const {
  auto r = read_scalar<abi::ViolationTime>(lib_->fn().violation_status, d, perf_policy);
  if (!r) return Reading<ViolationCounter>::fail(r.status);
  return Reading<ViolationCounter>::ok(ViolationCounter{r->referenceTime, r->violationTime});
}

Reading<unsigned> Nvml::retired_pages(Device d, unsigned cause) const {
  auto fn = lib_->fn().retired_pages;
  if (!fn) return Reading<unsigned>::fail(abi::kErrorFunctionNotFound);
  // A zero-sized buffer asks for the count only; drivers answer Success or Insufficient Size with it.
  unsigned count = 0;
  abi::Return rc = fn(d, cause, &count, nullptr);
  if (rc == abi::kSuccess || rc == abi::kErrorInsufficientSize) return Reading<unsigned>::ok(count);
  return Reading<unsigned>::fail(rc);
}

Reading<bool> Nvml::retired_pages_pending(Device d) const {
  auto r = read_scalar<unsigned>(lib_->fn().retired_pages_pending, d);
  return r ? Reading<bool>::ok(*r != 0) : Reading<bool>::fail(r.status);
}

Reading<RemappedRows> Nvml::remapped_rows(Device d) const {
  auto fn = lib_->fn().remapped_rows;
  if (!fn) return Reading<RemappedRows>::fail(abi::kErrorFunctionNotFound);
  unsigned corr = 0, unc = 0, pending = 0, failure = 0;
  abi::Return rc = fn(d, &corr, &unc, &pending, &failure);
  if (rc != abi::kSuccess) return Reading<RemappedRows>::fail(rc);
  return Reading<RemappedRows>::ok(RemappedRows{corr, unc, pending != 0, failure != 0});
}

Reading<std::vector<ProcessUtilization>> Nvml::process_utilization(Device d, unsigned long long since_us) const {
  using R = Reading<std::vector<ProcessUtilization>>;
  auto fn = lib_->fn().process_utilization;
  if (!fn) return R::fail(abi::kErrorFunctionNotFound);
  unsigned count = 0;
  abi::Return rc = fn(d, nullptr, &count, since_us);
  if (rc == abi::kSuccess || rc == abi::kErrorNotFound) return R::ok({});  // Not Found: no sample in the window
  for (int attempt = 0; attempt < 3 && rc == abi::kErrorInsufficientSize; ++attempt) {
    unsigned capacity = count + 8;
    std::vector<abi::ProcessUtilizationSample> buf(capacity);
    count = capacity;
    rc = fn(d, buf.data(), &count, since_us);
    if (rc == abi::kErrorNotFound) return R::ok({});
    if (rc != abi::kSuccess) continue;
    std::vector<ProcessUtilization> out;  // the driver may keep several samples per process: newest wins
    for (unsigned i = 0; i < count && i < capacity; ++i) {
      const auto& s = buf[i];
      auto same = std::find_if(out.begin(), out.end(), [&](const ProcessUtilization& p) { return p.pid == s.pid; });
      if (same == out.end()) out.push_back({s.pid, s.timeStamp, s.smUtil, s.memUtil});
      else if (s.timeStamp >= same->timestamp_us) *same = {s.pid, s.timeStamp, s.smUtil, s.memUtil};
    }
    return R::ok(std::move(out));
  }
  return R::fail(rc);
}

Reading<MemoryInfo> Nvml::bar1_memory(Device d) const {
  auto r = read_scalar<abi::BAR1Memory>(lib_->fn().bar1_memory, d);
  if (!r) return Reading<MemoryInfo>::fail(r.status);
  return Reading<MemoryInfo>::ok(MemoryInfo{r->bar1Total, r->bar1Free, r->bar1Used, std::nullopt});
}

Reading<MemoryInfo> Nvml::cc_protected_memory(Device d) const {
  auto r = read_scalar<abi::Memory_v1>(lib_->fn().cc_protected_memory, d);
  if (!r) return Reading<MemoryInfo>::fail(r.status);
  return Reading<MemoryInfo>::ok(MemoryInfo{r->total, r->free, r->used, std::nullopt});
}

Reading<std::vector<GpuProcess>> Nvml::compute_processes(Device d) const {
  return processes(d, lib_->fn().compute_processes, false);
}

Reading<std::vector<GpuProcess>> Nvml::graphics_processes(Device d) const {
  return processes(d, lib_->fn().graphics_processes, true);
}

Reading<std::vector<GpuProcess>> Nvml::processes(Device d, abi::Return (*fn)(Device, unsigned*, void*),
                                                 bool graphics) const {
  using R = Reading<std::vector<GpuProcess>>;
  if (!fn) return R::fail(abi::kErrorFunctionNotFound);
  const unsigned stride = lib_->fn().process_record_size;
  unsigned count = 0;
  abi::Return rc = fn(d, &count, nullptr);
  if (rc == abi::kSuccess) return R::ok({});
  // The list can grow between the sizing call and the fetch: retry with room to spare.
  for (int attempt = 0; attempt < 5 && rc == abi::kErrorInsufficientSize; ++attempt) {
    unsigned capacity = count * 2 + 8;
    std::vector<unsigned char> buf(static_cast<size_t>(capacity) * stride);
    count = capacity;
    rc = fn(d, &count, buf.data());
    if (rc != abi::kSuccess) continue;
    std::vector<GpuProcess> out;
    for (unsigned i = 0; i < count && i < capacity; ++i) {
      const unsigned char* rec = buf.data() + static_cast<size_t>(i) * stride;
      GpuProcess p;
      p.graphics = graphics;
      std::memcpy(&p.pid, rec, sizeof p.pid);
      unsigned long long used = 0;
      std::memcpy(&used, rec + offsetof(abi::ProcessInfo_v1, usedGpuMemory), sizeof used);
      if (used != abi::kValueNotAvailable) p.used_bytes = used;
      if (stride >= sizeof(abi::ProcessInfo_v2)) {
        unsigned gi = 0, ci = 0;
        std::memcpy(&gi, rec + offsetof(abi::ProcessInfo_v2, gpuInstanceId), sizeof gi);
        std::memcpy(&ci, rec + offsetof(abi::ProcessInfo_v2, computeInstanceId), sizeof ci);
        if (gi != 0xFFFFFFFFu) p.gpu_instance = gi;
        if (ci != 0xFFFFFFFFu) p.compute_instance = ci;
      }
      out.push_back(p);
    }
    return R::ok(std::move(out));
  }
  return R::fail(rc);
}

const char* compute_mode_name(unsigned mode) noexcept {
  switch (mode) {
    case 0: return "Default";
    case 1: return "Exclusive_Thread";
    case 2: return "Prohibited";
    case 3: return "Exclusive_Process";
    default: return "Unknown";
  }
}

}  // namespace gpumem::nvml
