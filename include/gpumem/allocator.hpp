// The caching allocator engine: one Allocator per device, over one Backend.
//
// Semantics follow PyTorch's CUDA caching allocator:
//  - allocate(bytes, stream) returns device memory usable on `stream`; sizes are rounded up to 512 bytes.
//  - deallocate(ptr, stream) gives it back. The block is reusable at once on its own stream; if it was
//    used on other streams (record_stream), only after those streams passed the free.
//  - Freed memory stays cached (reserved) until empty_cache(); a limit (set_limit / set_memory_fraction)
//    caps reserved bytes: an allocation that would cross it first releases the cache, then throws
//    OutOfMemoryError.
// Thread-safety: every method may be called from any thread. Each stream has its own pool and lock;
// only growth of physical memory takes the shared lock.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "gpumem/backend.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/events.hpp"
#include "gpumem/snapshot.hpp"
#include "gpumem/stats.hpp"

namespace gpumem {

struct AllocatorConfig {
  // Physical memory is taken from the device in chunks of at least this much (rounded to the backend's
  // granularity). 0 picks the default: 1/256 of what is reserved, between 2 MiB and 64 MiB.
  std::size_t min_chunk_bytes = 0;
  // Cut every map call into units of at most this size (rounded to the granularity), so that
  // empty_cache() can unmap finer. 0: one call per contiguous run of physical memory (fewest calls).
  std::size_t map_unit_bytes = 0;
  // Stitch free pages into a new block (instead of growing) only while at most this fraction of the
  // reserved memory is mapped but free, or when growing would cross the limit or fill the device.
  double stitch_free_fraction = 0.25;
  // Virtual address space reserved per arena; 0 = the device's total memory (an eighth for small blocks).
  std::size_t pool_va_bytes = 0;
  // Cap on reserved bytes; 0 = none.
  std::size_t limit_bytes = 0;
  // Use plain allocate/free even if the backend supports virtual memory.
  bool force_plain = false;
};

enum class FreeResult { ok, null_pointer, unknown_pointer, double_free };

class Allocator {
 public:
  explicit Allocator(std::shared_ptr<Backend> backend, AllocatorConfig config = {});
  ~Allocator();
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Throws OutOfMemoryError when the request cannot be served, std::invalid_argument for bytes == 0
  // is NOT an error: it returns nullptr like cudaMalloc(0) in PyTorch.
  void* allocate(std::size_t bytes, StreamId stream = 0);
  // Never throws. An unknown pointer or a double free is reported through the error handler and
  // counted in num_invalid_frees; the allocator stays consistent.
  void deallocate(void* ptr, StreamId stream = 0) noexcept;
  FreeResult try_deallocate(void* ptr, StreamId stream = 0) noexcept;
  // Marks ptr as used on `stream`: its memory is not reused until `stream` passed the free.
  // Throws gpumem::Error for a pointer this allocator did not hand out.
  void record_stream(void* ptr, StreamId stream);

  void empty_cache();
  void set_memory_fraction(double fraction);  // (0, 1] of the device's total; std::invalid_argument else
  void set_limit(std::size_t bytes);          // 0 removes the limit
  std::size_t limit() const;

  DeviceStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  std::string memory_summary(bool abbreviated = false) const;
  MemInfo mem_get_info() const;

  // Bytes usable at ptr (the rounded block size); 0 for an unknown pointer.
  std::size_t block_size(const void* ptr) const;
  // Largest block that could be handed out without asking the device for more.
  std::size_t largest_free_block() const;

  Backend& backend() const;
  const AllocatorConfig& config() const;

  // Called with one sentence for each invalid free; the default writes it to stderr.
  using ErrorHandler = std::function<void(const std::string&)>;
  void set_error_handler(ErrorHandler handler);

  // Every block, region and mapping at one moment (taken under all pool locks). O(blocks).
  AllocatorSnapshot snapshot() const;

  // Observers receive every event (gpumem/events.hpp) from now on, until removed. Adding one twice
  // has no effect. Thread-safe; removal waits for events being delivered.
  void add_observer(std::shared_ptr<AllocatorObserver> observer);
  void remove_observer(const AllocatorObserver* observer);

  // Checks every internal invariant (block list, free lists, page accounting, stats); throws
  // gpumem::Error describing the first violation. For tests; O(blocks).
  void check_invariants() const;

 private:
  void* allocate_after_releasing_cache(std::size_t bytes, StreamId stream);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumem
