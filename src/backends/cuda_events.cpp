#include "backends/cuda_events.hpp"

namespace gpumem::cuda {

CUevent CudaEventPool::take() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      CUevent e = free_.back();
      free_.pop_back();
      all_[e] = true;
      return e;
    }
  }
  CUevent e = nullptr;
  check(driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  std::lock_guard<std::mutex> lock(mutex_);
  all_.emplace(e, true);
  return e;
}

void CudaEventPool::give(CUevent event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = all_.find(event);
  if (it == all_.end() || !it->second) return;  // unknown or already given back
  it->second = false;
  free_.push_back(event);
}

void CudaEventPool::destroy_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [e, in_use] : all_) driver().cuEventDestroy(e);
  all_.clear();
  free_.clear();
}

}  // namespace gpumem::cuda
