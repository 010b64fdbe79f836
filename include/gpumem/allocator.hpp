// The caching allocator engine: one Allocator per device, over one Backend.
//
// Semantics follow PyTorch's CUDA caching allocator:
//  - allocate(bytes, stream) returns device memory usable on `stream`; sizes are rounded up to 512 bytes.
//  - deallocate(ptr, stream) gives it back. The block is reusable at once on its own stream; if it was
//    used on other streams (record_stream), only after those streams passed the free.
//  - Freed memory stays cached (reserved) until empty_cache(); a limit (set_limit / set_memory_fraction)
//    caps reserved bytes: an allocation that would cross it first releases the cache, then throws
//    OutOfMemoryError.
//  - Private pools (CUDA graphs, torch.cuda.MemPool): between begin_allocate_to_pool(id, filter) and
//    end_allocate_to_pool(id), every allocation whose stream `filter` accepts is served from pool `id`'s own
//    memory, which no other allocation ever gets while the pool lives: a captured graph keeps using the
//    addresses of blocks freed during its capture. A pool lives while its use count (one per begin or
//    create_or_incref_pool, minus one per release_pool) is above zero; then its free memory is given back
//    and its live blocks (a graph's outputs still held) return to the device when the program frees them.
//    While a capture is underway nothing is released or synchronised, and frees that need events wait
//    until no capture is underway (as in PyTorch).
// Thread-safety: every method may be called from any thread. Each stream has its own pool and lock;
// only growth of physical memory takes the shared lock.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
  // Map in units of this size (rounded to the granularity): empty_cache() gives memory back in these
  // units. 0: one page (the backend's granularity), the finest.
  std::size_t map_unit_bytes = 0;
  // Stitch free pages (of any stream's pool) into a new block instead of growing only while at most this
  // fraction of the reserved memory is mapped but free, or when growing would cross the limit or fill
  // the device. 1.0: always reuse free pages before asking the device, so peaks follow live bytes.
  double stitch_free_fraction = 1.0;
  // Let a growth whose size is not whole pages take along the free part of a page beside a live block,
  // mapping that page a second time (see Arena::SharePlan): fewer pages stranded beside long-lived
  // blocks (a KV cache). false: part-pages are used only by growing into the hole beside them.
  bool share_part_pages = true;
  // Virtual address space reserved per arena; 0 = the device's total memory (an eighth for small blocks).
  std::size_t pool_va_bytes = 0;
  // Cap on reserved bytes; 0 = none.
  std::size_t limit_bytes = 0;
  // Use plain allocate/free even if the backend supports virtual memory.
  bool force_plain = false;
};

// PyTorch's MempoolId_t: a graph pool handle or a MemPool id.
using PoolId = std::pair<unsigned long long, unsigned long long>;
// Whether an allocation on this stream goes to the pool (PyTorch passes "is this stream capturing into my
// graph" or "is this the thread that entered use_mem_pool").
using PoolFilter = std::function<bool(StreamId)>;

// A private pool's allocated blocks at one moment (CUDA graph trees checkpoint and restore them).
struct PoolCheckpoint {
  PoolId pool{};
  struct Entry {
    DevicePtr addr;
    std::size_t size;       // the block's bytes
    std::size_t requested;  // what the program asked for
    StreamId stream;
  };
  std::vector<Entry> blocks;
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

  // Does nothing while a capture is underway (nothing may be synchronised then).
  void empty_cache();

  // Private pools (see the top of this file). begin throws gpumem::Error if `pool` is already being
  // allocated to.
  void begin_allocate_to_pool(PoolId pool, PoolFilter filter);
  void end_allocate_to_pool(PoolId pool) noexcept;
  void create_or_incref_pool(PoolId pool);
  void release_pool(PoolId pool) noexcept;
  int pool_use_count(PoolId pool) const;  // 0 for an unknown or released pool
  // torch.cuda.MemPool(use_on_oom=True): an allocation outside every private pool that would fail takes a
  // cached free block of this live pool on its stream instead (never growing it); the block then belongs
  // to the pool. Throws gpumem::Error for a pool not in use.
  void set_pool_use_on_oom(PoolId pool, bool on);
  // Addresses of the blocks the program holds in the pool.
  std::vector<DevicePtr> pool_live_blocks(PoolId pool) const;
  PoolCheckpoint checkpoint_pool(PoolId pool) const;
  // Makes the pool's allocated blocks exactly the checkpoint's: frees the others, allocates the missing
  // ones at their addresses. Returns the addresses it allocated. Throws gpumem::Error when an address is
  // no longer free in the pool (nothing changed then only if the first step failed).
  std::vector<DevicePtr> restore_pool(const PoolCheckpoint& checkpoint);
  void set_memory_fraction(double fraction);  // (0, 1] of the device's total, at least one page; else invalid_argument
  void set_limit(std::size_t bytes);          // 0 removes the limit; below one page: invalid_argument
  std::size_t limit() const;

  DeviceStats stats() const;
  void reset_peak_stats();
  void reset_accumulated_stats();
  std::string memory_summary(bool abbreviated = false) const;
  MemInfo mem_get_info() const;

  // Bytes usable at ptr (the rounded block size); 0 for an unknown pointer.
  std::size_t block_size(const void* ptr) const;
  // The live block holding ptr anywhere inside it: its start and usable bytes; {nullptr, 0} if none.
  // Exact starts are a hash lookup; interior pointers walk the blocks (rare: IPC sharing).
  std::pair<void*, std::size_t> live_block_containing(const void* ptr) const;
  // Largest free block already mapped: handed out with no driver call. A larger request may still be
  // served without asking the device for more, from free pages stitched together.
  std::size_t largest_free_block() const;

  // Sharing a live allocation with another process (CUDA IPC): the whole pages holding it, as ranges of
  // chunks the backend exported (descriptors owned by the caller). The caller keeps the allocation alive
  // while the other process uses it. Throws gpumem::Error when ptr is not the start of a live allocation
  // or lies in a plain segment, BackendError when the backend cannot share.
  struct SharedPiece {
    std::vector<int> fds;  // Backend::export_pages: the chunk, or only the pages shared
    std::size_t chunk_bytes = 0, offset = 0, bytes = 0;
  };
  struct SharedAllocation {
    std::size_t offset = 0;  // of ptr from the start of the first page
    std::size_t bytes = 0;   // the pages, in all
    std::vector<SharedPiece> pieces;
  };
  SharedAllocation export_allocation(const void* ptr);

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
  // Cooperative release: when the device itself is full (not this allocator's limit) even after its own
  // cache was released, the hook is asked to get memory freed elsewhere (other processes' caches) and
  // returns whether any was; then the allocation is tried once more. The engine knows nothing of how.
  // Set it before the allocator is shared among threads; it is called without any allocator lock held.
  using ReleaseOthersHook = std::function<bool(std::size_t bytes)>;
  void set_release_others_hook(ReleaseOthersHook hook);

  // Checks every internal invariant (block list, free lists, page accounting, stats); throws
  // gpumem::Error describing the first violation. For tests; O(blocks).
  void check_invariants() const;

 private:
  void* allocate_after_releasing_cache(std::size_t bytes, StreamId stream);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpumem
