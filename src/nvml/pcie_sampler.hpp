// PCIe throughput without blocking: nvmlDeviceGetPcieThroughput sleeps ~20 ms per call inside the
// driver, so one background thread measures the GPUs in turn and publishes the latest values.
// Contract: latest() never calls NVML and returns at once (nothing until the first measurement);
// the destructor stops the thread (it may wait for one in-flight NVML call to return).
#pragma once
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "nvml/nvml.hpp"

namespace gpumem::nvml {

struct PcieRate {
  std::optional<unsigned> rx_kbps, tx_kbps;  // absent: not measured yet or not supported
};

class PcieSampler {
 public:
  PcieSampler(std::shared_ptr<const Nvml> nvml, std::vector<abi::Device> devices);
  ~PcieSampler();
  PcieSampler(const PcieSampler&) = delete;
  PcieSampler& operator=(const PcieSampler&) = delete;

  PcieRate latest(size_t i) const;  // i indexes the `devices` given to the constructor
  unsigned rounds() const;          // full passes over all devices completed so far
  // Waits until the first pass is done, at most `timeout`: a one-shot reading (dmon -c 1 -s t) would
  // otherwise always come before any measurement. True once it is done.
  bool wait_first_round(std::chrono::milliseconds timeout) const;

 private:
  void run();
  std::shared_ptr<const Nvml> nvml_;
  std::vector<abi::Device> devices_;
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;  // stop_ for run(), a finished pass for wait_first_round()
  std::vector<PcieRate> rates_;
  unsigned rounds_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpumem::nvml
