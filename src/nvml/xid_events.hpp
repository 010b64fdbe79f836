// The last XID (critical error) of each GPU, from an NVML event set. Contract: the constructor creates
// one set and registers every device for nvmlEventTypeXidCriticalError once; poll() drains the events
// that arrived without ever blocking (wait with timeout 0); last_xid(i) is absent where the driver
// lacks events or the GPU cannot report XIDs, 0 until one arrives, then the newest XID number. A
// missing event entry point (old driver) or a failing registration disables only that part.
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include "nvml/nvml.hpp"

namespace gpumem::nvml {

class XidEvents {
 public:
  XidEvents(std::shared_ptr<const Nvml> nvml, std::vector<abi::Device> devices);
  ~XidEvents();
  XidEvents(const XidEvents&) = delete;
  XidEvents& operator=(const XidEvents&) = delete;

  void poll();
  std::optional<unsigned long long> last_xid(size_t i) const;

 private:
  std::shared_ptr<const Nvml> nvml_;
  std::vector<abi::Device> devices_;
  abi::EventSet set_ = nullptr;
  std::vector<bool> registered_;
  std::vector<unsigned long long> last_;
};

}  // namespace gpumem::nvml
