#include "backends/cuda_events.hpp"

#include <optional>

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

CUevent CudaEventPool::record(CUstream stream, CUcontext own) {
  CUcontext owner = nullptr;  // another GPU's stream: an event of its own context records it
  const bool foreign = driver().cuStreamGetCtx && driver().cuStreamGetCtx(stream, &owner) == CUDA_SUCCESS &&
                       owner && owner != own;
  std::optional<ContextGuard> guard;
  if (foreign) guard.emplace(owner);
  CUevent event = foreign ? take_foreign() : take();
  if (CUresult r = driver().cuEventRecord(event, stream); r != CUDA_SUCCESS) {
    give(event);
    check(r, "cuEventRecord");
  }
  return event;
}

CUevent CudaEventPool::take_foreign() {
  CUevent e = nullptr;
  check(driver().cuEventCreate(&e, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    foreign_.emplace(e, true);
  } catch (...) {
    driver().cuEventDestroy(e);
    throw;
  }
  return e;
}

void CudaEventPool::give(CUevent event) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!foreign_.empty())
    if (auto f = foreign_.find(event); f != foreign_.end()) {
      foreign_.erase(f);
      driver().cuEventDestroy(event);
      return;
    }
  auto it = all_.find(event);
  if (it == all_.end() || !it->second) return;  // unknown or already given back
  it->second = false;
  free_.push_back(event);
}

void CudaEventPool::destroy_all() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [e, in_use] : all_) driver().cuEventDestroy(e);
  for (auto& [e, in_use] : foreign_) driver().cuEventDestroy(e);
  all_.clear();
  foreign_.clear();
  free_.clear();
}

}  // namespace gpumem::cuda
