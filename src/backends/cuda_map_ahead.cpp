#include "backends/cuda_map_ahead.hpp"

#include <unordered_set>

namespace gpumem::cuda {

void AheadCalls::on_worker_start() {
  driver().cuCtxSetCurrent(context_);
  int mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  driver().cuThreadExchangeStreamCaptureMode(&mode);
}

bool AheadCalls::create(std::uint64_t* handle, std::size_t page) {
  CUmemGenericAllocationHandle h = 0;
  if (driver().cuMemCreate(&h, page, &prop_, 0) != CUDA_SUCCESS) return false;
  *handle = h;
  return true;
}

bool AheadCalls::map(DevicePtr va, std::size_t page, std::uint64_t handle) {
  return driver().cuMemMap(CUdeviceptr(va), page, 0, handle, 0) == CUDA_SUCCESS;
}

bool AheadCalls::set_access(DevicePtr va, std::size_t bytes) {
  return driver().cuMemSetAccess(CUdeviceptr(va), bytes, accesses_.data(), accesses_.size()) == CUDA_SUCCESS;
}

void AheadCalls::unmap(DevicePtr va, std::size_t page) { driver().cuMemUnmap(CUdeviceptr(va), page); }
void AheadCalls::release(std::uint64_t handle) { driver().cuMemRelease(handle); }

std::vector<char> PremappedPages::prepare_run(const std::vector<std::pair<Handle, std::size_t>>& pages,
                                              DevicePtr va, std::size_t run_bytes, std::uint64_t& unmaps) {
  std::vector<char> ready(pages.size(), 0);
  if (at_.empty()) return ready;
  for (std::size_t i = 0, at = 0; i < pages.size(); at += pages[i].second, ++i) {
    auto it = at_.find(pages[i].first);
    ready[i] = it != at_.end() && it->second == va + at;
  }
  std::unordered_set<Handle> here, in_run;
  for (std::size_t i = 0; i < pages.size(); ++i) (ready[i] ? here : in_run).insert(pages[i].first);
  for (auto it = at_.begin(); it != at_.end();) {
    const bool in_the_way = it->second >= va && it->second < va + run_bytes;
    if (here.count(it->first) || (!in_run.count(it->first) && !in_the_way)) {
      ++it;
      continue;
    }
    driver().cuMemUnmap(CUdeviceptr(it->second), page_);
    ++unmaps;
    it = at_.erase(it);
  }
  return ready;
}

void PremappedPages::mapped(const std::vector<std::pair<Handle, std::size_t>>& pages, const std::vector<char>& ready) {
  for (std::size_t i = 0; i < pages.size(); ++i)
    if (ready[i]) at_.erase(pages[i].first);
}

std::size_t PremappedPages::forget(const std::vector<Handle>& pages) noexcept {
  std::size_t unmaps = 0;
  for (Handle h : pages) {
    auto it = at_.find(h);
    if (it == at_.end()) continue;
    driver().cuMemUnmap(CUdeviceptr(it->second), page_);
    ++unmaps;
    at_.erase(it);
  }
  return unmaps;
}

std::size_t PremappedPages::forget_in(DevicePtr base, std::size_t bytes) noexcept {
  std::size_t unmaps = 0;
  for (auto it = at_.begin(); it != at_.end();) {
    if (it->second < base || it->second >= base + bytes) {
      ++it;
      continue;
    }
    driver().cuMemUnmap(CUdeviceptr(it->second), page_);
    ++unmaps;
    it = at_.erase(it);
  }
  return unmaps;
}

void PremappedPages::unmap_all() noexcept {
  for (auto& [h, va] : at_) driver().cuMemUnmap(CUdeviceptr(va), page_);
  at_.clear();
}

}  // namespace gpumem::cuda
