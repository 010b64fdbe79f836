#include "gpumem/allocator.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <deque>
#include <mutex>
#include <stdexcept>

#include "engine/physical_memory.hpp"
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

  Impl(std::shared_ptr<Backend> b, AllocatorConfig c) : backend(std::move(b)), config(c), physical(*backend) {
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
    owned_pools.push_back(std::make_unique<StreamPool>(*backend, physical, config, stream, privates.captures(), graph));
    StreamPool* p = owned_pools.back().get();
    if (n == 1) {  // the first pool's peaks were the true ones so far: they seed the shared totals
      StreamPool* first = pool_at(0);
      std::lock_guard first_lock(first->lock());
      first->share_stats(shared_stats, true);
    }
    if (n >= 1) p->share_stats(shared_stats, false);
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
  std::size_t lend_from_other_pools(std::size_t bytes, const void* asking, std::vector<engine::Piece>& out) {
    if (privates.capturing()) return 0;
    std::size_t lent = 0;
    std::size_t n = count();
    for (std::size_t i = 0; i < n && lent < bytes; ++i) {
      StreamPool* p = pool_at(i);
      if (p->owns_arena(asking) || p->is_graph_pool() || !p->lock().try_lock()) continue;
      lent += p->lend_to_other_stream(bytes - lent, out);
      p->lock().unlock();
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
      physical.release_unused_chunks();
    }
    privates.retire_empty();
    return released;
  }

  std::size_t largest_free() {
    std::size_t best = 0;
    std::size_t n = count();
    for (std::size_t i = 0; i < n; ++i) {
      StreamPool* p = pool_at(i);
      std::lock_guard lock(p->lock());
      best = std::max(best, p->largest_free());
    }
    return best;
  }

  [[noreturn]] void throw_oom(std::size_t request, StreamId stream, const std::string& cause) {
    ++ooms;
    OutOfMemoryError::State s;
    s.requested = request;
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
    std::string msg = "gpumem: out of memory: cannot allocate " + format_bytes(request) + " on device " +
                      std::to_string(backend->device()) + " (stream " + std::to_string(stream) + "): " +
                      format_bytes(s.allocated) + " allocated, " + format_bytes(s.reserved) +
                      " reserved, largest free block " + format_bytes(s.largest_free) + ", ";
    msg += s.limit ? "limit " + format_bytes(s.limit) + ", " : std::string("no limit, ");
    msg += format_bytes(s.device_free) + " free of " + format_bytes(s.device_total) + " on the device";
    if (!cause.empty()) msg += " (" + cause + ")";
    throw OutOfMemoryError(msg, s);
  }

  DeviceStats collect_stats();
};

Allocator::Allocator(std::shared_ptr<Backend> backend, AllocatorConfig config) {
  if (!backend) throw std::invalid_argument("gpumem: an allocator needs a backend");
  impl_ = std::make_unique<Impl>(std::move(backend), config);
  impl_->error_handler = [](const std::string& msg) { std::fprintf(stderr, "%s\n", msg.c_str()); };
}

Allocator::~Allocator() = default;

void* Allocator::allocate(std::size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  Impl& d = *impl_;
  if (bytes > kMaxRequest) d.throw_oom(bytes, stream, "larger than any device");
  if (d.privates.capturing()) [[unlikely]] {
    if (StreamPool* graph_pool = d.privates.route(stream)) {
      std::string failure;
      {
        std::lock_guard lock(graph_pool->lock());
        try {
          return reinterpret_cast<void*>(graph_pool->allocate(bytes)->addr);
        } catch (const OutOfMemoryError& e) {
          failure = e.what();
        }
      }
      d.throw_oom(bytes, stream, failure + "; a CUDA graph capture is underway, so the cache cannot be released");
    }
  }
  StreamPool& pool = d.pool_for(stream);
  {
    std::lock_guard lock(pool.lock());
    try {
      return reinterpret_cast<void*>(pool.allocate(bytes)->addr);
    } catch (const OutOfMemoryError&) {
    }
  }
  return allocate_after_releasing_cache(bytes, stream);
}

void* Allocator::allocate_after_releasing_cache(std::size_t bytes, StreamId stream) {
  // Give every cached byte of every stream back, then try once more (PyTorch's retry).
  Impl& d = *impl_;
  ++d.alloc_retries;
  d.release_cached_everywhere();
  StreamPool& pool = d.pool_for(stream);
  std::string failure;
  {
    std::lock_guard lock(pool.lock());
    try {
      return reinterpret_cast<void*>(pool.allocate(bytes)->addr);
    } catch (const OutOfMemoryError& e) {
      failure = e.what();
    }
  }
  // The device is full rather than our own limit: others may give back memory they only cache.
  std::size_t cap = limit();
  bool under_limit = cap == 0 || std::size_t(stats().reserved_bytes[kAggregatePool].current) + bytes <= cap;
  if (d.release_others && under_limit && d.release_others(bytes)) {
    std::lock_guard lock(pool.lock());
    try {
      return reinterpret_cast<void*>(pool.allocate(bytes)->addr);
    } catch (const OutOfMemoryError& e) {
      failure = e.what();
    }
  }
  d.throw_oom(bytes, stream, failure);
}

void Allocator::set_release_others_hook(ReleaseOthersHook hook) { impl_->release_others = std::move(hook); }

FreeResult Allocator::try_deallocate(void* ptr, StreamId stream) noexcept {
  if (!ptr) return FreeResult::null_pointer;
  Impl& d = *impl_;
  DevicePtr p = reinterpret_cast<DevicePtr>(ptr);
  // Fast path: the pool of the stream it is freed on.
  StreamPool* hint = d.lookup_pool(stream);
  if (hint) {
    std::lock_guard lock(hint->lock());
    if (hint->deallocate(p, stream)) return FreeResult::ok;
  }
  std::size_t n = d.count();
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* pool = d.pool_at(i);
    if (pool == hint) continue;
    std::lock_guard lock(pool->lock());
    if (pool->deallocate(p, stream)) return FreeResult::ok;
  }
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* pool = d.pool_at(i);
    std::lock_guard lock(pool->lock());
    if (pool->is_freed_block(p)) return FreeResult::double_free;
  }
  return FreeResult::unknown_pointer;
}

void Allocator::deallocate(void* ptr, StreamId stream) noexcept {
  FreeResult r = try_deallocate(ptr, stream);
  if (r == FreeResult::ok || r == FreeResult::null_pointer) return;
  ++impl_->invalid_frees;
  char buf[160];
  std::snprintf(buf, sizeof buf, "gpumem: %s %p ignored: %s", r == FreeResult::double_free ? "double free of" : "free of",
                ptr, r == FreeResult::double_free ? "it was already freed" : "this allocator never handed it out");
  try {
    std::lock_guard lock(impl_->handler_mutex);
    if (impl_->error_handler) impl_->error_handler(buf);
  } catch (...) {
  }
}

void Allocator::record_stream(void* ptr, StreamId stream) {
  bool found = impl_->with_live_block(reinterpret_cast<DevicePtr>(ptr), stream,
                                      [&](StreamPool& pool, Block* b) { pool.record_stream(b, stream); });
  if (!found) throw Error("gpumem: record_stream on a pointer that is not a live allocation of this allocator");
}

void Allocator::empty_cache() { impl_->release_cached_everywhere(); }

void Allocator::set_memory_fraction(double fraction) {
  if (!(fraction > 0.0 && fraction <= 1.0))
    throw std::invalid_argument("gpumem: memory fraction must be in (0, 1], got " + std::to_string(fraction));
  const std::size_t total = impl_->backend->mem_info().total;
  const std::size_t bytes = std::size_t(fraction * double(total));
  // A tiny fraction must not round to 0, which means "no limit".
  if (bytes < impl_->backend->granularity())
    throw std::invalid_argument("gpumem: memory fraction " + std::to_string(fraction) + " of " + format_bytes(total) +
                                " is less than one page (" + format_bytes(impl_->backend->granularity()) + ")");
  set_limit(bytes);
}

void Allocator::set_limit(std::size_t bytes) {
  if (bytes != 0 && bytes < impl_->backend->granularity())
    throw std::invalid_argument("gpumem: a limit of " + std::to_string(bytes) + " bytes is less than one page (" +
                                format_bytes(impl_->backend->granularity()) + "); 0 means no limit");
  {
    std::lock_guard lock(impl_->physical.mutex());
    impl_->physical.set_limit(bytes);
    if (!bytes || impl_->physical.reserved() <= bytes) return;
  }
  impl_->release_cached_everywhere();  // over the new limit: give back what is cached
}

std::size_t Allocator::limit() const {
  std::lock_guard lock(impl_->physical.mutex());
  return impl_->physical.limit();
}

DeviceStats Allocator::Impl::collect_stats() {
  DeviceStats out;
  std::size_t n = count();
  auto add = [](StatArray& into, const engine::SplitStat& split) {
    StatArray from = split.get_all();
    for (int k = 0; k < 3; ++k) {
      into[k].current += from[k].current;
      into[k].allocated += from[k].allocated;
      into[k].freed += from[k].freed;
      into[k].peak = from[k].peak;  // one pool; with several, the shared peaks replace it below
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* p = pool_at(i);
    std::lock_guard lock(p->lock());
    const engine::PoolStats& s = p->stats();
    add(out.allocation, s.allocation);
    add(out.active, s.active);
    add(out.inactive_split, s.inactive_split);
    add(out.allocated_bytes, s.allocated_bytes);
    add(out.active_bytes, s.active_bytes);
    add(out.inactive_split_bytes, s.inactive_split_bytes);
    add(out.requested_bytes, s.requested_bytes);
  }
  if (n > 1) {
    auto peaks = [](StatArray& into, const engine::SharedSplit& shared) {
      into[kAggregatePool].peak = shared.all_peak();
      into[kSmallPool].peak = shared.peak(0);
      into[kLargePool].peak = shared.peak(1);
    };
    peaks(out.allocation, shared_stats.allocation);
    peaks(out.active, shared_stats.active);
    peaks(out.inactive_split, shared_stats.inactive_split);
    peaks(out.allocated_bytes, shared_stats.allocated_bytes);
    peaks(out.active_bytes, shared_stats.active_bytes);
    peaks(out.inactive_split_bytes, shared_stats.inactive_split_bytes);
    peaks(out.requested_bytes, shared_stats.requested_bytes);
  }
  std::lock_guard lock(physical.mutex());
  out.segment = physical.segment_stats();
  out.reserved_bytes = physical.reserved_stats();
  out.num_device_alloc = physical.device_allocs();
  out.num_device_free = physical.device_frees();
  const BackendCallCounts& calls = backend->call_counts();
  out.num_maps = std::int64_t(calls.maps);
  out.num_unmaps = std::int64_t(calls.unmaps);
  out.num_alloc_retries = alloc_retries.load();
  out.num_ooms = ooms.load();
  out.num_invalid_frees = invalid_frees.load();
  out.num_sync_all_streams = sync_all.load();
  return out;
}

DeviceStats Allocator::stats() const { return impl_->collect_stats(); }

void Allocator::reset_peak_stats() {
  std::size_t n = impl_->count();
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* p = impl_->pool_at(i);
    std::lock_guard lock(p->lock());
    p->reset_peaks();
  }
  impl_->shared_stats.for_each([](engine::SharedSplit& s) { s.reset_peak(); });
  std::lock_guard lock(impl_->physical.mutex());
  impl_->physical.reset_peaks();
}

void Allocator::reset_accumulated_stats() {
  std::size_t n = impl_->count();
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* p = impl_->pool_at(i);
    std::lock_guard lock(p->lock());
    p->reset_accumulated();
  }
  std::lock_guard lock(impl_->physical.mutex());
  impl_->physical.reset_accumulated();
  impl_->alloc_retries = 0;
  impl_->ooms = 0;
}

MemInfo Allocator::mem_get_info() const { return impl_->backend->mem_info(); }

std::size_t Allocator::block_size(const void* ptr) const {
  std::size_t size = 0;
  impl_->with_live_block(reinterpret_cast<DevicePtr>(ptr), 0, [&](StreamPool&, Block* b) { size = b->size; });
  return size;
}

std::pair<void*, std::size_t> Allocator::live_block_containing(const void* ptr) const {
  const auto p = reinterpret_cast<DevicePtr>(ptr);
  if (std::size_t size = block_size(ptr)) return {const_cast<void*>(ptr), size};
  const std::size_t n = impl_->count();
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* pool = impl_->pool_at(i);
    std::lock_guard lock(pool->lock());
    for (bool small : {true, false}) {
      const Block* found = nullptr;
      pool->arena(small).for_each_block([&](const auto&, const Block* b) {
        if (b->state == engine::BlockState::allocated && b->addr <= p && p < b->end()) found = b;
      });
      if (found) return {reinterpret_cast<void*>(found->addr), found->size};
    }
  }
  return {nullptr, 0};
}

std::size_t Allocator::largest_free_block() const { return impl_->largest_free(); }

Allocator::SharedAllocation Allocator::export_allocation(const void* ptr) {
  Impl& d = *impl_;
  if (!d.backend->supports_sharing())
    throw BackendError(std::string("gpumem: the ") + d.backend->name() + " backend cannot share memory with other processes");
  SharedAllocation out;
  const auto addr = reinterpret_cast<DevicePtr>(ptr);
  bool found = d.with_live_block(addr, 0, [&](StreamPool& pool, Block* b) {
    if (b->addr != addr) throw Error("gpumem: only the start of an allocation can be shared");
    const std::size_t page = d.backend->granularity();
    const DevicePtr start = b->addr / page * page, end = (b->end() + page - 1) / page * page;
    const engine::Arena& arena = pool.arena(b->small).owns(b->addr) ? pool.arena(b->small) : pool.arena(!b->small);
    std::vector<engine::Piece> pieces = arena.pieces_behind(start, end - start);
    out.offset = b->addr - start;
    out.bytes = end - start;
    std::lock_guard lock(d.physical.mutex());
    try {
      for (const engine::Piece& p : pieces) {
        SharedPiece s;
        s.chunk_bytes = d.physical.bytes_of(p.chunk);
        s.offset = p.offset;
        s.bytes = p.bytes;
        s.fds = d.backend->export_chunk(d.physical.handle_of(p.chunk));
        out.pieces.push_back(std::move(s));
      }
    } catch (...) {
      for (auto& s : out.pieces)
        for (int fd : s.fds) ::close(fd);
      throw;
    }
  });
  if (!found) throw Error("gpumem: share of a pointer that is not a live allocation of this allocator");
  return out;
}

Backend& Allocator::backend() const { return *impl_->backend; }
const AllocatorConfig& Allocator::config() const { return impl_->config; }

void Allocator::set_error_handler(ErrorHandler handler) {
  std::lock_guard lock(impl_->handler_mutex);
  impl_->error_handler = std::move(handler);
}

void Allocator::check_invariants() const {
  std::size_t n = impl_->count();
  std::size_t backed = 0;
  for (std::size_t i = 0; i < n; ++i) {
    StreamPool* p = impl_->pool_at(i);
    std::lock_guard lock(p->lock());
    p->check_invariants();
    backed += p->arena(true).mapped_bytes() + p->arena(false).mapped_bytes();
  }
  std::lock_guard lock(impl_->physical.mutex());
  impl_->physical.check_invariants();
  bool plain = impl_->config.force_plain || !impl_->backend->supports_virtual_memory();
  if (!plain && backed + impl_->physical.free_piece_bytes() != impl_->physical.reserved())
    throw Error("reserved bytes differ from mapped plus free physical pieces");
}

void Allocator::begin_allocate_to_pool(PoolId pool, PoolFilter filter) { impl_->privates.begin(pool, std::move(filter)); }
void Allocator::end_allocate_to_pool(PoolId pool) noexcept { impl_->privates.end(pool); }
void Allocator::create_or_incref_pool(PoolId pool) { impl_->privates.incref(pool); }
int Allocator::pool_use_count(PoolId pool) const { return impl_->privates.use_count(pool); }

void Allocator::release_pool(PoolId pool) noexcept {
  Impl& d = *impl_;
  if (!d.privates.release(pool) || d.privates.capturing()) return;
  // The pool's graphs are gone; their last replay may still run: wait for it, then give back what is free.
  try {
    d.backend->synchronize();
  } catch (...) {
    return;  // the memory stays cached; empty_cache() tries again
  }
  for (StreamPool* p : d.privates.stream_pools(pool)) {
    std::lock_guard lock(p->lock());
    p->process_pending(false);
    p->release_cached();
  }
  {
    std::lock_guard lock(d.physical.mutex());
    d.physical.release_unused_chunks();
  }
  d.privates.retire_empty();
}

std::vector<DevicePtr> Allocator::pool_live_blocks(PoolId pool) const {
  std::vector<DevicePtr> out;
  for (StreamPool* p : impl_->privates.stream_pools(pool)) {
    std::lock_guard lock(p->lock());
    p->for_each_live([&](const Block* b) { out.push_back(b->addr); });
  }
  return out;
}

PoolCheckpoint Allocator::checkpoint_pool(PoolId pool) const {
  PoolCheckpoint cp;
  cp.pool = pool;
  for (StreamPool* p : impl_->privates.stream_pools(pool)) {
    std::lock_guard lock(p->lock());
    p->for_each_live([&](const Block* b) { cp.blocks.push_back({b->addr, b->size, b->requested, p->stream()}); });
  }
  return cp;
}

std::vector<DevicePtr> Allocator::restore_pool(const PoolCheckpoint& cp) {
  auto same = [](const PoolCheckpoint::Entry& e, const Block* b) { return e.addr == b->addr && e.size == b->size; };
  std::vector<DevicePtr> allocated;
  std::vector<StreamPool*> pools = impl_->privates.stream_pools(cp.pool);
  for (StreamPool* p : pools) {  // first free what the checkpoint does not hold
    std::lock_guard lock(p->lock());
    std::vector<Block*> extra;
    p->for_each_live([&](const Block* b) {
      if (std::none_of(cp.blocks.begin(), cp.blocks.end(), [&](const auto& e) { return same(e, b); }))
        extra.push_back(const_cast<Block*>(b));
    });
    for (Block* b : extra) p->free_now(b);
  }
  for (const PoolCheckpoint::Entry& e : cp.blocks) {  // then allocate what it holds and is free now
    auto owner = std::find_if(pools.begin(), pools.end(), [&](StreamPool* p) { return p->stream() == e.stream; });
    if (owner == pools.end())
      throw Error("gpumem: cannot restore a pool checkpoint: its stream no longer allocates in the pool");
    std::lock_guard lock((*owner)->lock());
    if (Block* live = (*owner)->find_live(e.addr); live && live->size == e.size) continue;
    if (!(*owner)->allocate_at(e.addr, e.size, e.requested))
      throw Error("gpumem: cannot restore a pool checkpoint: " + format_bytes(e.size) + " at " +
                  std::to_string(e.addr) + " is no longer free in the pool");
    allocated.push_back(e.addr);
  }
  return allocated;
}

}  // namespace gpumem
