// The state behind Allocator (gpumem/allocator.hpp), shared by the files that implement it: allocator.cpp
// (allocation, free, cache, stats) and allocator_pools.cpp (private pools). Not a public header.
#pragma once
#include "gpumem/allocator.hpp"
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "engine/event_hub.hpp"
#include "engine/physical_memory.hpp"
#include "engine/snapshot_builder.hpp"
#include "engine/private_pools.hpp"
#include "engine/stream_pool.hpp"

namespace gpumem {
using engine::Block;
using engine::StreamPool;

namespace {
constexpr std::size_t kMaxPools = 1024;
// Larger than any device: refused before any work (the rounding below would overflow near SIZE_MAX).
constexpr std::size_t kMaxRequest = std::size_t(1) << 50;

}  // namespace

struct Allocator::Impl {
  std::shared_ptr<Backend> backend;
  AllocatorConfig config;
  engine::EventHub hub;
  engine::PhysicalMemory physical;
  std::mutex pools_mutex;  // creating pools only
  std::array<std::atomic<StreamPool*>, kMaxPools> pools{};
  std::atomic<std::size_t> pool_count{0};
  std::deque<std::unique_ptr<StreamPool>> owned_pools;
  std::atomic<std::int64_t> alloc_retries{0}, ooms{0}, invalid_frees{0}, sync_all{0};
  engine::SharedPoolStats shared_stats;  // fed by every pool once a second one exists: exact peaks
  std::mutex handler_mutex;
  ErrorHandler error_handler;
  engine::PrivatePools privates{[this](StreamId s) { return add_pool(s, true); }};
  ReleaseOthersHook release_others;  // set before the allocator is shared (see allocator.hpp)

  Impl(std::shared_ptr<Backend> b, AllocatorConfig c)
      : backend(std::move(b)), config(c), hub(backend->device()), physical(*backend) {
    physical.set_limit(config.limit_bytes);
    physical.set_foreign_lender(
        [this](std::size_t bytes, const void* asking, std::vector<engine::Piece>& out) {
          return lend_from_other_pools(bytes, asking, out);
        });
  }
  ~Impl() {
    owned_pools.clear();  // arenas give their pieces back before the chunks are released
  }

  std::size_t count() const { return pool_count.load(std::memory_order_acquire); }
  StreamPool* pool_at(std::size_t i) const { return pools[i].load(std::memory_order_acquire); }

  StreamPool* find_pool(StreamId stream) const {
    std::size_t n = count();
    for (std::size_t i = 0; i < n; ++i)
      if (StreamPool* p = pool_at(i); p->stream() == stream && !p->is_graph_pool()) return p;
    return nullptr;
  }

  // Streams hash into a small table of hints; a hint is checked against the pool's stream, so a stale
  // or colliding one only costs the scan below. Read-mostly: no shared writes on the hot path.
  static std::size_t hint_slot(StreamId stream) { return (std::uint64_t(stream) * 0x9E3779B97F4A7C15ull) >> 58; }
  std::array<std::atomic<StreamPool*>, 64> hints{};

  StreamPool* lookup_pool(StreamId stream) const {
    StreamPool* p = hints[hint_slot(stream)].load(std::memory_order_acquire);
    if (p && p->stream() == stream) return p;
    return find_pool(stream);
  }

  StreamPool& pool_for(StreamId stream) {
    if (StreamPool* p = lookup_pool(stream)) return *p;
    StreamPool* p = nullptr;
    {
      std::lock_guard lock(pools_mutex);
      p = find_pool(stream);
    }
    if (!p) p = add_pool(stream, false);
    hints[hint_slot(stream)].store(p, std::memory_order_release);
    return *p;
  }

  // A new stream pool in the lock-free table (normal: one per stream; graph: one per private pool and
  // stream, made by PrivatePools).
  StreamPool* add_pool(StreamId stream, bool graph) {
    std::lock_guard lock(pools_mutex);
    if (!graph)
      if (StreamPool* p = find_pool(stream)) return p;
    std::size_t n = count();
    if (n == kMaxPools) throw Error("gpumem: more than 1024 streams and private pools allocate on one device");
    owned_pools.push_back(std::make_unique<StreamPool>(*backend, physical, config, stream, privates.captures(), graph, hub));
    StreamPool* p = owned_pools.back().get();
    if (n == 1) {  // the first pool's peaks were the true ones so far: they seed the shared totals
      StreamPool* first = pool_at(0);
      std::lock_guard first_lock(first->lock());
      std::lock_guard shared_lock(shared_stats.lock());
      first->share_stats(shared_stats, true);
    }
    if (n >= 1) {
      std::lock_guard shared_lock(shared_stats.lock());
      p->share_stats(shared_stats, false);
    }
    pools[n].store(p, std::memory_order_release);
    pool_count.store(n + 1, std::memory_order_release);
    return p;
  }

  // Which pool holds ptr live, with its lock held; nullptr if none.
  template <typename Fn>
  bool with_live_block(DevicePtr ptr, StreamId hint, Fn&& fn) {
    StreamPool* first = lookup_pool(hint);
    if (first) {
      std::lock_guard lock(first->lock());
      if (Block* b = first->find_live(ptr)) {
        fn(*first, b);
        return true;
      }
    }
    std::size_t n = count();
    for (std::size_t i = 0; i < n; ++i) {
      StreamPool* p = pool_at(i);
      if (p == first) continue;
      std::lock_guard lock(p->lock());
      if (Block* b = p->find_live(ptr)) {
        fn(*p, b);
        return true;
      }
    }
    return false;
  }

  // Called by a growing arena with its pool's lock and the physical mutex held: a pool busy elsewhere
  // (try_lock fails) is skipped, so two growing pools never wait for each other. Private (graph) pools
  // never lend, and nothing is lent during a capture (lending waits for the lending stream).
  // First from the pools whose streams are found idle, then, if still short, from the others after
  // waiting for their streams: a thread serving on its own stream is then held up by another thread's
  // kernels only when the idle streams' free pages do not cover its growth (16 serving threads on an
  // H100: 8,996 waits in a 45 s run before, 5 now).
  std::size_t lend_from_other_pools(std::size_t bytes, const void* asking, std::vector<engine::Piece>& out) {
    if (privates.capturing()) return 0;
    std::size_t lent = 0;
    std::size_t n = count();
    for (bool wait : {false, true}) {
      for (std::size_t i = 0; i < n && lent < bytes; ++i) {
        StreamPool* p = pool_at(i);
        if (p->owns_arena(asking) || p->is_graph_pool() || !p->lock().try_lock()) continue;
        lent += p->lend_to_other_stream(bytes - lent, out, wait);
        p->lock().unlock();
      }
    }
    return lent;
  }

  // Gives back every cached byte, except the memory of private pools still in use (a graph replays into
  // it). Nothing at all while a capture is underway: no synchronisation is allowed then.
  std::size_t release_cached_everywhere() {
    if (privates.capturing()) return 0;
    std::vector<StreamPool*> keep = privates.in_use();
    std::size_t released = 0;
    std::size_t n = count();
    for (std::size_t i = 0; i < n; ++i) {
      StreamPool* p = pool_at(i);
      if (p->is_graph_pool() && std::find(keep.begin(), keep.end(), p) != keep.end()) continue;
      std::lock_guard lock(p->lock());
      p->process_pending(true);
      released += p->release_cached();
    }
    ++sync_all;
    {
      std::lock_guard lock(physical.mutex());
      if (std::size_t returned = physical.release_unused_chunks()) hub.emit(EventKind::give_back, 0, returned, 0, 0);
    }
    privates.retire_empty();
    return released;
  }

  // The largest free extent of every pool, or of `stream`'s own pool only (not graph pools).
  std::size_t largest_free(const StreamId* stream = nullptr) {
    std::size_t best = 0;
    std::size_t n = count();
    for (std::size_t i = 0; i < n; ++i) {
      StreamPool* p = pool_at(i);
      if (stream && (p->stream() != *stream || p->is_graph_pool())) continue;
      std::lock_guard lock(p->lock());
      best = std::max(best, p->largest_free());
    }
    return best;
  }

  [[noreturn]] void throw_oom(std::size_t request, StreamId stream, const std::string& cause, bool retried,
                              std::size_t released_bytes) {
    ++ooms;
    OutOfMemoryError::State s;
    s.requested = request;
    s.device = backend->device();
    s.stream = stream;
    s.virtual_memory = retried && !config.force_plain && backend->supports_virtual_memory();  // it was tried
    s.cache_released = retried;
    s.released_bytes = released_bytes;
    s.cause = cause;
    DeviceStats st = collect_stats();
    s.allocated = std::size_t(st.allocated_bytes[kAggregatePool].current);
    s.reserved = std::size_t(st.reserved_bytes[kAggregatePool].current);
    {
      std::lock_guard lock(physical.mutex());
      s.limit = physical.limit();
    }
    try {
      MemInfo info = backend->mem_info();
      s.device_free = info.free;
      s.device_total = info.total;
    } catch (...) {
    }
    s.largest_free = largest_free();
    s.largest_free_here = largest_free(&stream);
    MemoryEvent e;
    e.kind = EventKind::oom;
    e.size = request;
    e.stream = stream;
    e.oom = &s;
    hub.emit(e);
    throw OutOfMemoryError(explain_out_of_memory(s), s);
  }

  // With locks_held, the caller holds the locks of the first `pools` pools and the physical lock.
  DeviceStats collect_stats(bool locks_held = false, std::size_t pools = 0);
};

}  // namespace gpumem
