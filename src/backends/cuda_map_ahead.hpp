// The CUDA side of pages made ahead of need (map_ahead.hpp, used by cuda_backend.cpp): the worker's
// driver calls, the pages a chunk took from the worker while they are still mapped where the worker
// put them, until map_run maps them there for good (or elsewhere: then they are unmapped from there),
// and AheadGrowth, which ties both to the backend's call counts.
// Not thread-safe: PremappedPages and AheadGrowth are used under the backend's serialized calls.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "backends/map_ahead.hpp"

namespace gpumem::cuda {

// The worker's calls: this device's properties (a copy: the worker never reads what the backend may
// change), every peer that may access it, a relaxed capture mode (a graph captured meanwhile by another
// thread stays valid).
class AheadCalls final : public AheadDriver {
 public:
  AheadCalls(CUcontext context, const CUmemAllocationProp& prop, std::vector<CUmemAccessDesc> accesses)
      : context_(context), prop_(prop), accesses_(std::move(accesses)) {}
  void on_worker_start() override;
  bool create(std::uint64_t* handle, std::size_t page) override;
  bool map(DevicePtr va, std::size_t page, std::uint64_t handle) override;
  bool set_access(DevicePtr va, std::size_t bytes) override;
  void unmap(DevicePtr va, std::size_t page) override;
  void release(std::uint64_t handle) override;

 private:
  CUcontext context_;
  CUmemAllocationProp prop_;
  std::vector<CUmemAccessDesc> accesses_;
};

class PremappedPages {
 public:
  using Handle = CUmemGenericAllocationHandle;
  explicit PremappedPages(std::size_t page) : page_(page) {}

  void add(Handle h, DevicePtr va) { at_.emplace(h, va); }
  // For a run of pages (handle, size) about to be mapped from va: which of them lie there already (1).
  // Every other page of the run, and any page lying in [va, va+run_bytes), is unmapped from where it
  // lies first. Returns the mask; `unmaps` counts the driver calls.
  std::vector<char> prepare_run(const std::vector<std::pair<Handle, std::size_t>>& pages, DevicePtr va,
                                std::size_t run_bytes, std::uint64_t& unmaps);
  // The run was mapped: the pages that lay there already are mapped for good (unmap() removes them).
  void mapped(const std::vector<std::pair<Handle, std::size_t>>& pages, const std::vector<char>& ready);
  // Pages going back, or addresses going back: unmapped from where they lie. Return the unmaps made.
  std::size_t forget(const std::vector<Handle>& pages) noexcept;
  std::size_t forget_in(DevicePtr base, std::size_t bytes) noexcept;
  void unmap_all() noexcept;
  bool empty() const noexcept { return at_.empty(); }

 private:
  template <typename Pred>
  std::size_t unmap_where(Pred pred) noexcept;  // pred(handle, address): unmap it

  std::size_t page_;
  std::unordered_map<Handle, DevicePtr> at_;
};

// The backend's growth ahead of need: off until enable(); the worker starts at the first prepare().
// Every unmap it makes on the calling thread, and the worker's own figures, go into `counts`.
class AheadGrowth {
 public:
  using Handle = CUmemGenericAllocationHandle;
  explicit AheadGrowth(BackendCallCounts& counts) : counts_(counts) {}
  ~AheadGrowth() { shut(); }
  AheadGrowth(const AheadGrowth&) = delete;
  AheadGrowth& operator=(const AheadGrowth&) = delete;

  // Pages of `granule` bytes; `make_calls` gives the worker its driver calls when it starts.
  void enable(std::size_t granule, std::function<std::unique_ptr<AheadDriver>()> make_calls);
  bool enabled() const noexcept { return bool(make_calls_); }
  void prepare(DevicePtr va, std::size_t bytes);
  void give_back();
  // Pages made ahead from `va` on (at most n) appended to `pages`, still mapped there (premapped()).
  void take(DevicePtr va, std::size_t n, std::vector<Handle>& pages);
  // Spare pages (unmapped) appended to `pages`, at most n.
  void take_spares(std::size_t n, std::vector<Handle>& pages);
  bool holds();  // pages waiting or spare
  // Before another use of [va, va+bytes): the pages made ahead there are unmapped (this thread's time).
  void clear(DevicePtr va, std::size_t bytes) noexcept;
  void drop() noexcept;  // every page made ahead goes back (memory is given back, the device is full)
  void note() noexcept;  // the worker's figures into the counts
  PremappedPages& premapped() noexcept { return premapped_; }
  // Pages, or addresses, going back: unmapped from where they lie premapped.
  void forget(const std::vector<Handle>& pages) noexcept { counts_.driver_unmaps += premapped_.forget(pages); }
  void forget_in(DevicePtr base, std::size_t bytes) noexcept { counts_.driver_unmaps += premapped_.forget_in(base, bytes); }
  void shut() noexcept;  // the worker stopped, its pages and the premapped ones unmapped and released

 private:
  BackendCallCounts& counts_;
  std::size_t granule_ = 0;
  std::function<std::unique_ptr<AheadDriver>()> make_calls_;
  std::unique_ptr<AheadDriver> calls_;
  std::unique_ptr<MapAhead> ahead_;  // after calls_: stops before its driver calls go
  PremappedPages premapped_{0};
};

}  // namespace gpumem::cuda
