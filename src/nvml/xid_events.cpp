#include "nvml/xid_events.hpp"

namespace gpumem::nvml {

XidEvents::XidEvents(std::shared_ptr<const Nvml> nvml, std::vector<abi::Device> devices)
    : nvml_(std::move(nvml)), devices_(std::move(devices)), registered_(devices_.size(), false), last_(devices_.size(), 0) {
  const Functions& f = nvml_->library().fn();
  if (!f.event_set_create || !f.register_events || !f.event_set_wait) return;
  if (f.event_set_create(&set_) != abi::kSuccess) {
    set_ = nullptr;
    return;
  }
  for (size_t i = 0; i < devices_.size(); ++i)
    if (devices_[i]) registered_[i] = f.register_events(devices_[i], abi::kEventTypeXidCriticalError, set_) == abi::kSuccess;
}

XidEvents::~XidEvents() {
  const Functions& f = nvml_->library().fn();
  if (set_ && f.event_set_free) f.event_set_free(set_);
}

void XidEvents::poll() {
  if (!set_) return;
  const Functions& f = nvml_->library().fn();
  // Bounded: a storm of events is read over several polls rather than holding the sampler.
  for (int n = 0; n < 256; ++n) {
    abi::EventData e{};
    if (f.event_set_wait(set_, &e, 0) != abi::kSuccess) return;  // Timeout: nothing pending
    if (!(e.eventType & abi::kEventTypeXidCriticalError)) continue;
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i] == e.device) last_[i] = e.eventData;
  }
}

std::optional<unsigned long long> XidEvents::last_xid(size_t i) const {
  if (i >= registered_.size() || !registered_[i]) return std::nullopt;
  return last_[i];
}

}  // namespace gpumem::nvml
