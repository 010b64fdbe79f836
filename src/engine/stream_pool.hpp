// A stream pool: everything one stream allocates, behind one lock. Two arenas (small requests up to
// 1 MiB, large above), the table of live blocks, the blocks freed but still in use on other streams,
// and the pool's share of the statistics. Pools of different streams never wait for each other; they
// meet only in PhysicalMemory when memory must grow.
// A graph pool is the share of one private pool (CUDA graph / MemPool) that one stream allocates: it
// never stitches, and the allocator releases its memory only once the private pool is released.
#pragma once
#include <atomic>
#include <cstddef>
#include <vector>

#include "engine/arena.hpp"
#include "engine/event_hub.hpp"
#include "engine/pool_stats.hpp"
#include "engine/pointer_map.hpp"
#include "engine/spin_lock.hpp"

namespace gpumem::engine {

class StreamPool;

// A pool's lock. Releasing it publishes what the pool's statistics changed while it was held
// (PoolStats::publish): one place for every operation that changes them.
class PoolLock {
 public:
  explicit PoolLock(StreamPool& pool) noexcept : pool_(pool) {}
  void lock() noexcept { spin_.lock(); }
  bool try_lock() noexcept { return spin_.try_lock(); }
  void unlock() noexcept;

 private:
  StreamPool& pool_;
  SpinLock spin_;
};

class StreamPool {
 public:
  // `captures` counts the captures underway in the allocator: while it is non-zero no event is recorded
  // or queried (work queued on a capturing stream is not run, only recorded into the graph).
  StreamPool(Backend& backend, PhysicalMemory& physical, const AllocatorConfig& config, StreamId stream,
             const std::atomic<int>& captures, bool graph_pool, const EventHub& hub);
  ~StreamPool();

  StreamId stream() const noexcept { return stream_; }
  bool is_graph_pool() const noexcept { return graph_pool_; }
  PoolLock& lock() noexcept { return lock_; }

  // All below require lock() held.
  Block* allocate(std::size_t request);  // throws OutOfMemoryError
  // A cached free block only, never growth: nullptr when none fits (MemPool(use_on_oom=True) fallback).
  Block* allocate_cached(std::size_t request);
  // The last resort before out-of-memory: a free block of the arena this size does not go to (a small
  // request in the free part of a large pool's page that live blocks keep, a large one in free small
  // pages), never growth; nullptr when none fits. Its statistics count it by its size, as any other.
  Block* allocate_in_other_arena(std::size_t request);
  // Returns false if ptr is not live in this pool.
  bool deallocate(DevicePtr ptr, StreamId free_stream) noexcept;
  Block* find_live(DevicePtr ptr) const noexcept { return live_.find(ptr); }
  void record_stream(Block* b, StreamId stream);
  // Returns freed-but-pending blocks whose streams are done; with `wait`, waits for them first.
  void process_pending(bool wait) noexcept;
  std::size_t release_cached();
  // Lends pages behind this pool's free ranges to another stream's pool (see Arena); requires lock()
  // and PhysicalMemory's mutex held. Returns bytes lent.
  std::size_t lend_to_other_stream(std::size_t bytes, std::vector<Piece>& out, bool wait);
  bool owns_arena(const void* arena) const noexcept { return arena == &small_ || arena == &large_; }
  bool has_pending() const noexcept { return !pending_.empty(); }
  std::size_t live_blocks() const noexcept { return live_.size(); }
  std::size_t mapped_bytes() const noexcept { return small_.mapped_bytes() + large_.mapped_bytes(); }
  template <typename Fn>
  void for_each_live(Fn&& fn) const {
    live_.for_each([&](DevicePtr, const Block* b) { fn(b); });
  }
  // Checkpoint restore: allocates exactly [addr, addr+size) (nullptr if not free here), or frees a live
  // block at once, with no event (the caller has made sure no stream still uses it).
  Block* allocate_at(DevicePtr addr, std::size_t size, std::size_t requested);
  void free_now(Block* b) noexcept;
  // Arena::describe_at over both arenas, with this pool's stream; empty if neither holds addr.
  std::string describe_at(DevicePtr addr) const;
  // True if ptr is the start of a block this pool holds free or pending (a double free).
  bool is_freed_block(DevicePtr ptr) const noexcept;

  // The statistics as of now (a lazily parked block counted as freed: see park_lazily).
  const PoolStats& stats() noexcept {
    settle_parked();
    return stats_;
  }
  // Requires lock() held (or the pool not yet published) and shared.lock().
  void share_stats(SharedPoolStats& shared, bool seed) {
    settle_parked();  // shared totals see every change as it is made
    stats_.share(shared, seed);
  }
  void reset_peaks() noexcept;
  void reset_accumulated() noexcept;
  std::size_t largest_free() const noexcept;
  const Arena& arena(bool small) const noexcept { return small ? small_ : large_; }
  // Blocks freed by the program, still waiting for other streams.
  template <typename Fn>
  void for_each_pending(Fn&& fn) const {
    for (const Pending& p : pending_) fn(p.block);
  }
  void check_invariants() const;

 private:
  struct Pending {
    Block* block;
    std::vector<EventHandle> events;
    bool needs_sync;  // recording an event failed: only a full synchronize can return it
    bool deferred;    // freed during a capture: its events are recorded once no capture is underway
  };
  bool capturing() const noexcept { return captures_.load(std::memory_order_relaxed) != 0; }
  Block* allocate(std::size_t request, bool may_grow, bool other_arena = false);
  void record_deferred_events(Pending& p) noexcept;
  void account(Block* b, bool allocated) noexcept;
  void account_active(Block* b, bool active) noexcept;
  void refresh_inactive_split(bool small) noexcept;
  void return_block(Block* b) noexcept;
  // The last freed block waits here, uncoalesced, until the next call: a program that frees and
  // re-allocates the same size gets it back without touching the free index. Any other request first
  // returns it to its arena, so placement and fragmentation are as if it had never waited.
  void flush_parked() noexcept {
    if (parked_) return_parked();
  }
  void return_parked() noexcept;
  // Parks b, freed by the program, leaving its statistics as they were: most often the next call takes
  // it back (a loop that frees and allocates one size), and then the pair costs a few counts, not
  // fourteen updates. Only while this pool's statistics are its own (no other stream's pool: shared totals must
  // see each change as it is made, or their peaks would not be exact). Readers and every other path
  // settle it first (settle_parked), so nothing outside sees the difference.
  void park_lazily(Block* b) noexcept;
  // A lazily parked block's statistics made as an eager park's (freed: not allocated, not active; an
  // inactive split block).
  void settle_parked() noexcept;
  // The decreases the program's free of a lazily parked block b makes (account, account_active).
  void uncount(Block* b) noexcept;
  // A lazily parked block b leaves the park for its arena: the counts an eager park and return make.
  void unpark_counts(Block* b) noexcept;

  StreamId stream_;
  bool graph_pool_;
  const std::atomic<int>& captures_;
  Backend& backend_;
  const EventHub& hub_;
  PoolLock lock_{*this};
  BlockRecycler recycler_;  // before the arenas: their blocks live in its slabs
  Arena small_, large_;
  PointerMap live_;
  std::vector<Pending> pending_;
  Block* parked_ = nullptr;
  bool parked_lazily_ = false;            // parked_'s statistics still count it as allocated
  std::size_t parked_requested_ = 0;      // what the program had asked for it (lazy parking)
  PoolStats stats_;
  friend class PoolLock;
};

}  // namespace gpumem::engine
