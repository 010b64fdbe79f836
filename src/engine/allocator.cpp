#include "gpumem/allocator.hpp"

#include "engine/allocator_impl.hpp"

namespace gpumem {

Allocator::Allocator(std::shared_ptr<Backend> backend, AllocatorConfig config) {
  if (!backend) throw std::invalid_argument("gpumem: an allocator needs a backend");
  impl_ = std::make_unique<Impl>(std::move(backend), config);
  impl_->error_handler = [](const std::string& msg) { std::fprintf(stderr, "%s\n", msg.c_str()); };
}

Allocator::~Allocator() = default;

void* Allocator::allocate(std::size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  Impl& d = *impl_;
  if (bytes > kMaxRequest) d.throw_oom(bytes, stream, "", false, 0);
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
      d.throw_oom(bytes, stream,
                  failure + "; allocations are being routed to a private pool (a CUDA graph capture or "
                            "torch.cuda.use_mem_pool), so the cache is not released",
                  false, 0);
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
  std::size_t released = d.release_cached_everywhere();
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
  // Free bytes the other arena of this stream's pool holds beside live blocks (which keep their pages
  // from being lent or given back): under a limit a serving workload's small pool can run out while the
  // large one holds tens of MiB in such part-pages.
  {
    std::lock_guard lock(pool.lock());
    if (Block* b = pool.allocate_in_other_arena(bytes)) return reinterpret_cast<void*>(b->addr);
  }
  // The last resort, as PyTorch's: a free block of a MemPool created with use_on_oom.
  if (Block* b = d.privates.take_from_oom_pools(stream, [&](StreamPool& pool) -> Block* {
        try {
          return pool.allocate_cached(bytes);
        } catch (const OutOfMemoryError&) {
          return nullptr;
        }
      }))
    return reinterpret_cast<void*>(b->addr);
  if (!d.privates.capturing()) {  // as release_cached_everywhere: no driver release during a capture
    // A failed growth may have made pages it then could not use (the large part of a request made, its
    // rest refused): they go back now, so a caught out-of-memory leaves reserved where it was.
    std::lock_guard lock(d.physical.mutex());
    if (std::size_t returned = d.physical.release_unused_chunks()) d.hub.emit(EventKind::give_back, 0, returned, 0, 0);
  }
  d.throw_oom(bytes, stream, failure, true, released);
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
    // Pages made ahead of need are device memory beyond the reserved count: under a limit none wait.
    if (bytes) impl_->physical.map_ahead(0, 0);
    if (!bytes || impl_->physical.reserved() <= bytes) return;
  }
  impl_->release_cached_everywhere();  // over the new limit: give back what is cached
}

std::size_t Allocator::limit() const {
  std::lock_guard lock(impl_->physical.mutex());
  return impl_->physical.limit();
}

DeviceStats Allocator::Impl::collect_stats(bool locks_held, std::size_t pools) {
  DeviceStats out;
  std::size_t n = locks_held ? pools : count();
  // Every pool held at once: none is logging an operation, so a fold counts every one made so far.
  std::vector<std::unique_lock<engine::PoolLock>> held;
  if (!locks_held) {
    held.reserve(n);
    for (std::size_t i = 0; i < n; ++i) held.emplace_back(pool_at(i)->lock());
  }
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
    const engine::PoolStats& s = pool_at(i)->stats();
    add(out.allocation, s.allocation);
    add(out.active, s.active);
    add(out.inactive_split, s.inactive_split);
    add(out.allocated_bytes, s.allocated_bytes);
    add(out.active_bytes, s.active_bytes);
    add(out.inactive_split_bytes, s.inactive_split_bytes);
    add(out.requested_bytes, s.requested_bytes);
  }
  if (n > 1) {
    std::lock_guard shared_lock(shared_stats.lock());
    shared_stats.fold(true);
    const engine::StatPeaks& peaks = shared_stats.peaks();
    StatArray* in_order[engine::kStatCount] = {&out.allocation,      &out.active,       &out.inactive_split,
                                               &out.allocated_bytes, &out.active_bytes, &out.inactive_split_bytes,
                                               &out.requested_bytes};
    for (int i = 0; i < engine::kStatCount; ++i) {
      (*in_order[i])[kAggregatePool].peak = peaks.all[i];
      (*in_order[i])[kSmallPool].peak = peaks.kind[i][0];
      (*in_order[i])[kLargePool].peak = peaks.kind[i][1];
    }
  }
  held.clear();
  std::unique_lock<std::mutex> lock(physical.mutex(), std::defer_lock);
  if (!locks_held) lock.lock();
  out.segment = physical.segment_stats();
  out.reserved_bytes = physical.reserved_stats();
  out.num_device_alloc = physical.device_allocs();
  out.num_device_free = physical.device_frees();
  backend->refresh_counts();
  const BackendCallCounts& calls = backend->call_counts();
  out.num_maps = std::int64_t(calls.maps);
  out.num_unmaps = std::int64_t(calls.unmaps);
  auto driver = [](std::uint64_t n, std::uint64_t ns) { return DeviceStats::DriverCalls{std::int64_t(n), std::int64_t(ns)}; };
  out.driver_create = driver(calls.driver_creates, calls.create_ns);
  out.driver_map = driver(calls.driver_maps, calls.map_ns);
  out.driver_access = driver(calls.access_sets, calls.access_ns);
  out.driver_unmap = driver(calls.driver_unmaps, calls.unmap_ns);
  out.driver_release = driver(calls.driver_releases, calls.release_ns);
  out.ahead = driver(calls.ahead_pages, calls.ahead_ns);
  out.ahead_unused = std::int64_t(calls.ahead_unused);
  out.ahead_held_bytes = std::int64_t(calls.ahead_held_bytes);
  out.ahead_held_peak_bytes = std::int64_t(calls.ahead_held_peak_bytes);
  out.driver_sync = driver(BackendCallCounts::load_shared(calls.syncs), BackendCallCounts::load_shared(calls.sync_ns));
  out.num_alloc_retries = alloc_retries.load();
  out.num_ooms = ooms.load();
  out.num_invalid_frees = invalid_frees.load();
  out.num_sync_all_streams = sync_all.load();
  return out;
}

DeviceStats Allocator::stats() const { return impl_->collect_stats(); }

void Allocator::reset_peak_stats() {
  // Every pool held at once (as collect_stats does): a fold then makes the shared totals current, and
  // the new window starts from them.
  std::size_t n = impl_->count();
  std::vector<std::unique_lock<engine::PoolLock>> held;
  held.reserve(n);
  for (std::size_t i = 0; i < n; ++i) held.emplace_back(impl_->pool_at(i)->lock());
  for (std::size_t i = 0; i < n; ++i) impl_->pool_at(i)->reset_peaks();
  {
    std::lock_guard shared_lock(impl_->shared_stats.lock());
    impl_->shared_stats.fold(true);
    impl_->shared_stats.reset_peaks();
  }
  held.clear();
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
    const engine::Arena& arena = pool.arena(b->small).owns(b->addr) ? pool.arena(b->small) : pool.arena(!b->small);
    const std::size_t granule = d.backend->granularity();
    auto [start, end] = arena.page_span(b->addr / granule * granule, (b->end() + granule - 1) / granule * granule);
    std::vector<engine::Piece> pieces = arena.pieces_behind(start, end - start);
    out.offset = b->addr - start;
    out.bytes = end - start;
    std::lock_guard lock(d.physical.mutex());
    try {
      for (const engine::Piece& p : pieces) {
        Backend::ExportedPages e =
            d.backend->export_pages(d.physical.handle_of(p.chunk), d.physical.bytes_of(p.chunk), p.offset, p.bytes);
        SharedPiece s;
        s.chunk_bytes = e.imported_bytes;
        s.offset = e.imported_offset;
        s.bytes = p.bytes;
        s.fds = std::move(e.fds);
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

AllocatorSnapshot Allocator::snapshot() const {
  Impl& d = *impl_;
  // Every pool lock in index order, then the physical lock: the order growth takes them in, and no
  // other path holds two pool locks, so this cannot deadlock.
  std::size_t n = d.count();
  std::vector<std::unique_lock<engine::PoolLock>> locks;
  locks.reserve(n);
  for (std::size_t i = 0; i < n; ++i) locks.emplace_back(d.pool_at(i)->lock());
  std::lock_guard physical_lock(d.physical.mutex());
  AllocatorSnapshot snap;
  snap.device = d.backend->device();
  snap.backend = d.backend->name();
  snap.granularity = d.backend->granularity();
  snap.limit = d.physical.limit();
  snap.reserved = d.physical.reserved();
  snap.free_physical = d.physical.free_piece_bytes();
  snap.part_page_physical = d.physical.part_page_bytes();
  snap.stats = d.collect_stats(true, n);
  for (std::size_t i = 0; i < n; ++i) engine::describe_pool(*d.pool_at(i), snap);
  engine::sort_snapshot(snap);
  return snap;
}

void Allocator::add_observer(std::shared_ptr<AllocatorObserver> observer) {
  if (!observer) throw std::invalid_argument("gpumem: add_observer needs an observer");
  impl_->hub.add(std::move(observer));
}

void Allocator::remove_observer(const AllocatorObserver* observer) { impl_->hub.remove(observer); }

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
  if (!plain && backed + impl_->physical.free_piece_bytes() + impl_->physical.part_page_bytes() !=
                    impl_->physical.reserved())
    throw Error("reserved bytes differ from mapped plus free physical pieces");
}

}  // namespace gpumem
