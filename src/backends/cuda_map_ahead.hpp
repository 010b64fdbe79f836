// The CUDA side of pages made ahead of need (map_ahead.hpp, used by cuda_backend.cpp): the worker's
// driver calls, and the pages a chunk took from the worker while they are still mapped where the worker
// put them, until map_run maps them there for good (or elsewhere: then they are unmapped from there).
// Not thread-safe: PremappedPages is used under the backend's serialized calls.
#pragma once
#include <cstddef>
#include <cstdint>
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
  std::size_t page_;
  std::unordered_map<Handle, DevicePtr> at_;
};

}  // namespace gpumem::cuda
