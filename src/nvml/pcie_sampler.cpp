#include "nvml/pcie_sampler.hpp"

#include <chrono>

namespace gpumem::nvml {

PcieSampler::PcieSampler(std::shared_ptr<const Nvml> nvml, std::vector<abi::Device> devices)
    : nvml_(std::move(nvml)), devices_(std::move(devices)), rates_(devices_.size()) {
  thread_ = std::thread([this] { run(); });
}

PcieSampler::~PcieSampler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

PcieRate PcieSampler::latest(size_t i) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return i < rates_.size() ? rates_[i] : PcieRate{};
}

unsigned PcieSampler::rounds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return rounds_;
}

bool PcieSampler::wait_first_round(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return cv_.wait_for(lock, timeout, [this] { return rounds_ > 0 || stop_; }) && rounds_ > 0;
}

void PcieSampler::run() {
  while (true) {
    for (size_t i = 0; i < devices_.size(); ++i) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
      }
      PcieRate r;
      if (devices_[i]) {
        auto rx = nvml_->pcie_kbps(devices_[i], abi::kPcieRxBytes);
        auto tx = nvml_->pcie_kbps(devices_[i], abi::kPcieTxBytes);
        r.rx_kbps = rx.value;
        r.tx_kbps = tx.value;
      }
      std::lock_guard<std::mutex> lock(mutex_);
      rates_[i] = r;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    ++rounds_;
    cv_.notify_all();  // a first reading waited for
    // The driver's counter covers a 20 ms window; a pass every ~0.5 s is plenty for a 1 s display.
    if (cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stop_; })) return;
  }
}

}  // namespace gpumem::nvml
