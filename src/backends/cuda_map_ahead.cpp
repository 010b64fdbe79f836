#include "backends/cuda_map_ahead.hpp"

#include <unordered_set>

#include "backends/call_timer.hpp"

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

template <typename Pred>
std::size_t PremappedPages::unmap_where(Pred pred) noexcept {
  std::size_t unmaps = 0;
  for (auto it = at_.begin(); it != at_.end();) {
    if (!pred(it->first, it->second)) {
      ++it;
      continue;
    }
    driver().cuMemUnmap(CUdeviceptr(it->second), page_);
    ++unmaps;
    it = at_.erase(it);
  }
  return unmaps;
}

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
  unmaps += unmap_where([&](Handle h, DevicePtr at) {
    const bool in_the_way = at >= va && at < va + run_bytes;
    return !here.count(h) && (in_run.count(h) || in_the_way);
  });
  return ready;
}

void PremappedPages::mapped(const std::vector<std::pair<Handle, std::size_t>>& pages, const std::vector<char>& ready) {
  for (std::size_t i = 0; i < pages.size(); ++i)
    if (ready[i]) at_.erase(pages[i].first);
}

std::size_t PremappedPages::forget(const std::vector<Handle>& pages) noexcept {
  if (at_.empty()) return 0;  // the common case: nothing premapped
  const std::unordered_set<Handle> going(pages.begin(), pages.end());
  return unmap_where([&](Handle h, DevicePtr) { return going.count(h) != 0; });
}

std::size_t PremappedPages::forget_in(DevicePtr base, std::size_t bytes) noexcept {
  return unmap_where([&](Handle, DevicePtr va) { return va >= base && va < base + bytes; });
}

void PremappedPages::unmap_all() noexcept {
  for (auto& [h, va] : at_) driver().cuMemUnmap(CUdeviceptr(va), page_);
  at_.clear();
}

void AheadGrowth::enable(std::size_t granule, std::function<std::unique_ptr<AheadDriver>()> make_calls) {
  granule_ = granule;
  make_calls_ = std::move(make_calls);
  premapped_ = PremappedPages(granule);
}

void AheadGrowth::prepare(DevicePtr va, std::size_t bytes) {
  if (!enabled()) return;
  if (!ahead_) {
    calls_ = make_calls_();
    ahead_ = std::make_unique<MapAhead>(*calls_, granule_);
  }
  ahead_->prepare(va, bytes);
  note();
}

void AheadGrowth::give_back() {
  if (ahead_) ahead_->give_back();  // on its thread, like the making
}

void AheadGrowth::take(DevicePtr va, std::size_t n, std::vector<Handle>& pages) {
  if (!ahead_) return;
  for (std::uint64_t h : ahead_->take(va, n)) {
    premapped_.add(h, va + pages.size() * granule_);
    pages.push_back(h);
  }
  note();
}

void AheadGrowth::take_spares(std::size_t n, std::vector<Handle>& pages) {
  if (!ahead_) return;
  for (std::uint64_t h : ahead_->take_spare(n)) pages.push_back(h);
}

bool AheadGrowth::holds() { return ahead_ && ahead_->held(); }

void AheadGrowth::clear(DevicePtr va, std::size_t bytes) noexcept {
  if (!ahead_) return;
  Timed timed(counts_.unmap_ns);
  counts_.driver_unmaps += ahead_->clear(va, bytes);
}

void AheadGrowth::drop() noexcept {
  if (!ahead_) return;
  ahead_->drop();
  note();
}

void AheadGrowth::note() noexcept {
  if (!ahead_) return;
  counts_.ahead_pages = ahead_->pages_made();
  counts_.ahead_ns = ahead_->worker_ns();
  counts_.ahead_unused = ahead_->pages_unused();
  counts_.ahead_held_bytes = ahead_->pages_held() * granule_;
  counts_.ahead_held_peak_bytes = ahead_->pages_held_peak() * granule_;
}

void AheadGrowth::shut() noexcept {
  ahead_.reset();  // its worker stops; pages still waiting are unmapped and released
  calls_.reset();
  premapped_.unmap_all();
}

}  // namespace gpumem::cuda
