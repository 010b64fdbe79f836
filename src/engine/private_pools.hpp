// Private pools: the registry behind Allocator::begin_allocate_to_pool & co. (CUDA graphs, MemPool).
//
// A private pool is identified by PyTorch's MempoolId_t. It owns one graph StreamPool per stream that
// allocated into it (blocks are reused on their own stream only, as everywhere in the engine), a use
// count, and while allocations are routed to it, a filter that says which allocations go there.
// A pool whose use count reached zero is "freeable": the allocator gives its free memory back, and once
// nothing of it is left its StreamPools are kept as spares for the next pool on the same stream (stream
// pools are never destroyed: lookups run without locks).
//
// Every method takes mutex() itself; lock order: this mutex, then a stream pool's lock, then
// PhysicalMemory's.
#pragma once
#include <atomic>
#include <functional>
#include <mutex>
#include <vector>

#include "engine/stream_pool.hpp"
#include "gpumem/allocator.hpp"

namespace gpumem::engine {

class PrivatePools {
 public:
  // make_pool creates a new graph StreamPool for a stream (the allocator owns it).
  explicit PrivatePools(std::function<StreamPool*(StreamId)> make_pool) : make_pool_(std::move(make_pool)) {}

  // Captures underway (routing active): the one relaxed load on the allocation path.
  const std::atomic<int>& captures() const noexcept { return captures_; }
  bool capturing() const noexcept { return captures_.load(std::memory_order_relaxed) != 0; }

  // The graph StreamPool an allocation on `stream` goes to, or nullptr when no filter accepts it.
  StreamPool* route(StreamId stream);

  void begin(PoolId pool, PoolFilter filter);
  void end(PoolId pool) noexcept;
  void incref(PoolId pool);
  // Drops one use; returns true when the pool became freeable.
  bool release(PoolId pool) noexcept;
  int use_count(PoolId pool) const;
  std::vector<StreamPool*> stream_pools(PoolId pool) const;
  // The stream pools of every pool still in use: their memory must stay where it is.
  std::vector<StreamPool*> in_use() const;
  // Freeable pools whose stream pools hold nothing any more become spares. Call after releasing memory.
  void retire_empty() noexcept;
  // torch.cuda.MemPool(use_on_oom=True): a live pool whose free blocks an allocation outside every pool may
  // take as a last resort before it fails. take_from_oom_pools tries `take` (called with the stream pool's
  // lock held) on those pools' stream pools on `stream`, under this registry's mutex, so that no pool is
  // released and reused for a graph meanwhile; the first non-null result is returned.
  void set_use_on_oom(PoolId pool, bool on);
  Block* take_from_oom_pools(StreamId stream, const std::function<Block*(StreamPool&)>& take);

 private:
  struct Pool {
    PoolId id;
    int use_count = 0;
    std::vector<StreamPool*> pools;
    bool use_on_oom = false;
  };
  struct Capture {
    PoolId id;
    PoolFilter filter;
  };
  Pool* find(PoolId id);
  const Pool* find(PoolId id) const;
  Pool& find_or_create(PoolId id);

  std::function<StreamPool*(StreamId)> make_pool_;
  mutable std::mutex mutex_;
  std::atomic<int> captures_{0};
  std::vector<Pool> pools_;
  std::vector<Capture> routing_;
  std::vector<StreamPool*> spares_;
};

}  // namespace gpumem::engine
