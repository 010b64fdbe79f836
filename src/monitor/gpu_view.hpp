// One GPU at one instant, read lazily: each NVML value is fetched the first time a field asks for it
// and then reused, so a query pays only for the calls its fields need.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "monitor/common.hpp"
#include "nvml/nvml.hpp"

namespace gpumem::monitor {

class GpuView {
 public:
  GpuView(const nvml::Nvml& nvml, const GpuRef& ref, const std::string& timestamp)
      : nvml_(nvml), ref_(ref), timestamp_(timestamp) {}

  const nvml::Nvml& nvml() const { return nvml_; }
  unsigned index() const { return ref_.index; }
  nvml::abi::Device device() const { return ref_.device; }
  const std::string& timestamp() const { return timestamp_; }
  // Status to report for every per-device field when there is no handle.
  bool lost() const { return ref_.device == nullptr; }
  nvml::abi::Return handle_status() const { return ref_.status; }

  template <class T, class Read>
  const nvml::Reading<T>& cached(std::optional<nvml::Reading<T>>& slot, Read read) {
    if (!slot) slot = lost() ? nvml::Reading<T>::fail(ref_.status) : read();
    return *slot;
  }

  const nvml::Reading<std::string>& name() { return cached(name_, [&] { return nvml_.name(ref_.device); }); }
  const nvml::Reading<std::string>& uuid() { return cached(uuid_, [&] { return nvml_.uuid(ref_.device); }); }
  const nvml::Reading<std::string>& bus_id() { return cached(bus_, [&] { return nvml_.pci_bus_id(ref_.device); }); }
  const nvml::Reading<nvml::MemoryInfo>& memory() { return cached(mem_, [&] { return nvml_.memory(ref_.device); }); }
  const nvml::Reading<nvml::Utilization>& utilization() {
    return cached(util_, [&] { return nvml_.utilization(ref_.device); });
  }
  const nvml::Reading<std::vector<nvml::GpuProcess>>& compute_processes() {
    return cached(procs_, [&] { return nvml_.compute_processes(ref_.device); });
  }

 private:
  const nvml::Nvml& nvml_;
  GpuRef ref_;
  const std::string& timestamp_;
  std::optional<nvml::Reading<std::string>> name_, uuid_, bus_;
  std::optional<nvml::Reading<nvml::MemoryInfo>> mem_;
  std::optional<nvml::Reading<nvml::Utilization>> util_;
  std::optional<nvml::Reading<std::vector<nvml::GpuProcess>>> procs_;
};

}  // namespace gpumem::monitor
