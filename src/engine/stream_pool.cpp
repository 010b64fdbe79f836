#include "engine/stream_pool.hpp"

#include <algorithm>
#include <utility>

namespace gpumem::engine {
namespace {
constexpr std::size_t kRound = 512;
// The arena a block lies in. b->small says which pool's statistics count it (its request's size, as
// PyTorch's): the two differ only for a block placed in the other arena at the edge of out-of-memory.
bool in_small_arena(const Block* b) noexcept { return b->region->small; }
}

StreamPool::StreamPool(Backend& backend, PhysicalMemory& physical, const AllocatorConfig& config, StreamId stream,
                       const std::atomic<int>& captures, bool graph_pool, const EventHub& hub)
    : stream_(stream), graph_pool_(graph_pool), captures_(captures), backend_(backend), hub_(hub),
      small_(backend, physical, recycler_, config, stream, true, hub),
      large_(backend, physical, recycler_, config, stream, false, hub) {
  small_.set_sibling(&large_);
  large_.set_sibling(&small_);
  small_.set_capture_count(captures);
  large_.set_capture_count(captures);
  if (graph_pool) {
    small_.disable_stitching();
    large_.disable_stitching();
  }
}

StreamPool::~StreamPool() {
  flush_parked();
  for (Pending& p : pending_)
    for (EventHandle e : p.events) backend_.release_event(e);
}

void PoolLock::unlock() noexcept {
  pool_.stats_.publish();
  spin_.unlock();
}

Block* StreamPool::allocate(std::size_t request) { return allocate(request, true); }
Block* StreamPool::allocate_cached(std::size_t request) { return allocate(request, false); }
Block* StreamPool::allocate_in_other_arena(std::size_t request) { return allocate(request, false, true); }

Block* StreamPool::allocate(std::size_t request, bool may_grow, bool other_arena) {
  std::size_t size = (request + kRound - 1) / kRound * kRound;
  Arena& arena = (request <= kSmallRequestLimit) != other_arena ? small_ : large_;
  if (!pending_.empty() && !capturing()) process_pending(false);
  Block* b = parked_;
  bool counted = false;  // taken back from a lazy park: its statistics still count it
  if (b && b->size == size && in_small_arena(b) == arena.small_pool() &&
      b->small == (request <= kSmallRequestLimit)) {
    parked_ = nullptr;
    b->state = BlockState::allocated;
    counted = std::exchange(parked_lazily_, false);
    if (!counted) {
      stats_.inactive_split.decrease(arena.small_pool() ? 0 : 1, 1);
      stats_.inactive_split_bytes.decrease(arena.small_pool() ? 0 : 1, std::int64_t(b->size));
    }
  } else {
    flush_parked();
    b = may_grow ? arena.find(size) : arena.find_fit(size);
    if (!b && !may_grow) return nullptr;
    if (!b) {
      try {
        b = arena.grow(size);
      } catch (const OutOfMemoryError&) {
        b = arena.find_fit(size);  // a free block packing passed over (Arena::packing) beats failing
        if (!b) throw;
      }
    }
    b = arena.take(b, size);
    refresh_inactive_split(arena.small_pool());
  }
  b->requested = request;
  b->small = request <= kSmallRequestLimit;
  try {
    live_.insert(b->addr, b);
  } catch (...) {
    if (counted) unpark_counts(b);
    b->state = BlockState::allocated;
    arena.release(b);
    throw;
  }
  if (counted) {
    // One free and one allocation of the same block: the totals move, the current values only by the
    // difference in what was asked; the inactive split it was in between may have made a peak.
    const int k = b->small ? 0 : 1;
    const auto bytes = std::int64_t(b->size);
    stats_.inactive_split.visit(arena.small_pool() ? 0 : 1, 1);
    stats_.inactive_split_bytes.visit(arena.small_pool() ? 0 : 1, bytes);
    stats_.allocation.count_again(k, 1);
    stats_.allocated_bytes.count_again(k, bytes);
    stats_.active.count_again(k, 1);
    stats_.active_bytes.count_again(k, bytes);
    stats_.requested_bytes.decrease(k, std::int64_t(parked_requested_));
    stats_.requested_bytes.increase(k, std::int64_t(request));
  } else {
    account(b, true);
    account_active(b, true);
  }
  hub_.emit(EventKind::alloc, b->addr, b->size, request, stream_);
  return b;
}

bool StreamPool::deallocate(DevicePtr ptr, StreamId free_stream) noexcept {
  Block* b = live_.take(ptr);
  if (!b) return false;
  // Reported while the block is still ours (the lock is held): nobody can be handed it before.
  const bool observed = hub_.active();
  const std::size_t size = b->size, requested = b->requested;
  if (observed) hub_.emit(EventKind::free_requested, ptr, size, requested, free_stream);
  if (free_stream != stream_) {
    try {
      record_stream(b, free_stream);
    } catch (...) {
      // Without the record the block could be reused too early: wait for that stream instead.
      try {
        backend_.synchronize();
      } catch (...) {
      }
    }
  }
  if (!b->other_streams) {
    if (stats_.shared()) {
      account(b, false);
      return_block(b);
    } else {
      park_lazily(b);
    }
    if (observed) hub_.emit(EventKind::free_completed, ptr, size, requested, free_stream);
    return true;
  }
  account(b, false);  // no longer allocated; active until the other streams are done with it
  b->state = BlockState::pending;
  if (capturing()) {
    try {
      pending_.push_back(Pending{b, {}, false, true});
    } catch (...) {
      // No room to remember it, and no event may be recorded now: the block is left unused (lost
      // memory) rather than reused while another stream may still use it.
    }
    return true;
  }
  Pending p{b, {}, false, false};
  try {
    p.events.reserve(b->other_streams->size());
    for (StreamId s : *b->other_streams) p.events.push_back(backend_.record_event(s));
    pending_.push_back(std::move(p));
  } catch (...) {
    for (EventHandle e : p.events) backend_.release_event(e);
    try {
      pending_.push_back(Pending{b, {}, true, false});
    } catch (...) {
      try {
        backend_.synchronize();
      } catch (...) {
      }
      return_block(b);
    }
  }
  return true;
}

void StreamPool::record_stream(Block* b, StreamId stream) {
  if (stream == stream_) return;
  if (!b->other_streams) b->other_streams = new std::vector<StreamId>();
  auto& s = *b->other_streams;
  if (std::find(s.begin(), s.end(), stream) == s.end()) s.push_back(stream);
}

void StreamPool::record_deferred_events(Pending& p) noexcept {
  p.deferred = false;
  if (!p.block->other_streams) return;
  try {
    for (StreamId s : *p.block->other_streams) p.events.push_back(backend_.record_event(s));
  } catch (...) {
    p.needs_sync = true;
  }
}

void StreamPool::process_pending(bool wait) noexcept {
  if (capturing()) return;  // no event may be recorded, queried or waited for during a capture
  for (Pending& p : pending_)
    if (p.deferred) record_deferred_events(p);
  bool synced = false;
  if (wait) {
    try {
      backend_.synchronize();
      synced = true;
    } catch (...) {
    }
  }
  auto done = [&](Pending& p) {
    if (p.needs_sync) return synced;
    // Even after a synchronize: an event on another GPU's stream (record_stream) is not covered by it.
    for (EventHandle e : p.events) {
      try {
        if (!backend_.event_done(e)) return false;
      } catch (...) {
        return false;
      }
    }
    return true;
  };
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    Pending& p = pending_[i];
    if (done(p)) {
      for (EventHandle e : p.events) backend_.release_event(e);
      const DevicePtr addr = p.block->addr;
      const std::size_t size = p.block->size, requested = p.block->requested;
      return_block(p.block);
      hub_.emit(EventKind::free_completed, addr, size, requested, stream_);
    } else {
      if (kept != i) pending_[kept] = std::move(p);  // a self-move would empty p.events
      ++kept;
    }
  }
  pending_.resize(kept);
}

void StreamPool::return_block(Block* b) noexcept {
  account_active(b, false);
  flush_parked();
  b->state = BlockState::parked;
  b->requested = 0;
  delete b->other_streams;
  b->other_streams = nullptr;
  parked_ = b;
  stats_.inactive_split.increase(in_small_arena(b) ? 0 : 1, 1);
  stats_.inactive_split_bytes.increase(in_small_arena(b) ? 0 : 1, std::int64_t(b->size));
}

void StreamPool::park_lazily(Block* b) noexcept {
  flush_parked();
  b->state = BlockState::parked;
  parked_requested_ = b->requested;
  b->requested = 0;
  parked_ = b;
  parked_lazily_ = true;
}

void StreamPool::uncount(Block* b) noexcept {
  b->requested = parked_requested_;  // a parked block asks for nothing (park_lazily); its free counts it
  account(b, false);
  account_active(b, false);
  b->requested = 0;
}

void StreamPool::unpark_counts(Block* b) noexcept {
  // As an eager park and its return would have: freed, and in and out of the inactive split.
  const int k = in_small_arena(b) ? 0 : 1;
  uncount(b);
  stats_.inactive_split.visit(k, 1);
  stats_.inactive_split_bytes.visit(k, std::int64_t(b->size));
}

void StreamPool::settle_parked() noexcept {
  if (!parked_lazily_) return;
  parked_lazily_ = false;
  const int k = in_small_arena(parked_) ? 0 : 1;
  uncount(parked_);
  stats_.inactive_split.increase(k, 1);
  stats_.inactive_split_bytes.increase(k, std::int64_t(parked_->size));
}

void StreamPool::return_parked() noexcept {
  Block* b = parked_;
  bool small = in_small_arena(b);
  const int k = small ? 0 : 1;
  if (std::exchange(parked_lazily_, false)) {
    unpark_counts(b);
  } else {
    stats_.inactive_split.decrease(k, 1);
    stats_.inactive_split_bytes.decrease(k, std::int64_t(b->size));
  }
  parked_ = nullptr;
  Arena& arena = small ? small_ : large_;
  arena.settle_shared(arena.release(b));  // b may be merged away
  refresh_inactive_split(small);
}

std::size_t StreamPool::release_cached() {
  flush_parked();
  std::size_t released = small_.release_cached() + large_.release_cached();
  refresh_inactive_split(true);
  refresh_inactive_split(false);
  return released;
}

std::size_t StreamPool::lend_to_other_stream(std::size_t bytes, std::vector<Piece>& out, bool wait) {
  flush_parked();
  std::size_t lent = large_.lend_to_other_stream(bytes, out, wait);
  if (lent < bytes) lent += small_.lend_to_other_stream(bytes - lent, out, wait);
  refresh_inactive_split(true);
  refresh_inactive_split(false);
  return lent;
}

Block* StreamPool::allocate_at(DevicePtr addr, std::size_t size, std::size_t requested) {
  flush_parked();
  bool small = requested <= kSmallRequestLimit;
  Arena& arena = small ? small_ : large_;
  Block* b = arena.take_at(addr, size);
  if (!b) return nullptr;
  refresh_inactive_split(small);
  b->requested = requested;
  b->small = small;
  try {
    live_.insert(b->addr, b);
  } catch (...) {
    arena.release(b);
    refresh_inactive_split(small);
    throw;
  }
  account(b, true);
  account_active(b, true);
  return b;
}

void StreamPool::free_now(Block* b) noexcept {
  live_.erase(b->addr);
  account(b, false);
  return_block(b);
  flush_parked();
}

std::string StreamPool::describe_at(DevicePtr addr) const {
  for (const Arena* a : {&small_, &large_})
    if (std::string d = a->describe_at(addr); !d.empty()) return d + " on stream " + std::to_string(stream_);
  return "";
}

bool StreamPool::is_freed_block(DevicePtr ptr) const noexcept {
  for (const Arena* a : {&small_, &large_}) {
    if (!a->owns(ptr)) continue;
    bool found = false;
    a->for_each_block([&](const Region&, const Block* b) {
      if (b->addr == ptr && (b->state == BlockState::free || b->state == BlockState::pending || b->state == BlockState::parked))
        found = true;
    });
    return found;
  }
  return false;
}

void StreamPool::account(Block* b, bool allocated) noexcept {
  const int k = b->small ? 0 : 1;
  const auto size = std::int64_t(b->size), requested = std::int64_t(b->requested);
  if (allocated) {
    stats_.allocation.increase(k, 1);
    stats_.allocated_bytes.increase(k, size);
    stats_.requested_bytes.increase(k, requested);
  } else {
    stats_.allocation.decrease(k, 1);
    stats_.allocated_bytes.decrease(k, size);
    stats_.requested_bytes.decrease(k, requested);
  }
}

void StreamPool::account_active(Block* b, bool active) noexcept {
  const int k = b->small ? 0 : 1;
  if (active) {
    stats_.active.increase(k, 1);
    stats_.active_bytes.increase(k, std::int64_t(b->size));
  } else {
    stats_.active.decrease(k, 1);
    stats_.active_bytes.decrease(k, std::int64_t(b->size));
  }
}

void StreamPool::refresh_inactive_split(bool small) noexcept {
  const Arena& touched = small ? small_ : large_;
  bool parked_here = parked_ && in_small_arena(parked_) == small;
  stats_.inactive_split.set(small ? 0 : 1, std::int64_t(touched.free_blocks() + parked_here));
  stats_.inactive_split_bytes.set(small ? 0 : 1,
                                  std::int64_t(touched.free_bytes() + (parked_here ? parked_->size : 0)));
}

void StreamPool::reset_peaks() noexcept {
  settle_parked();
  stats_.for_each([](SplitStat& s) { s.reset_peak(); });
}

void StreamPool::reset_accumulated() noexcept {
  settle_parked();
  stats_.for_each([](SplitStat& s) { s.reset_accumulated(); });
}

std::size_t StreamPool::largest_free() const noexcept {
  std::size_t best = std::max(small_.largest_free(), large_.largest_free());
  if (parked_) {  // free: returned to its arena it merges with the free blocks beside it (never read early)
    std::size_t merged = parked_->size;
    for (const Block* n : {parked_->prev, parked_->next})
      if (n && n->state == BlockState::free) merged += n->size;
    best = std::max(best, merged);
  }
  return best;
}

void StreamPool::check_invariants() const {
  small_.check_invariants();
  large_.check_invariants();
  std::int64_t live_bytes = 0, live_count = 0, requested = 0;
  live_.for_each([&](DevicePtr key, const Block* b) {
    if (b->addr != key || b->state != BlockState::allocated) throw Error("live table holds a non-allocated block");
    live_bytes += std::int64_t(b->size);
    requested += std::int64_t(b->requested);
    ++live_count;
  });
  if (parked_lazily_) {  // still counted as allocated (park_lazily)
    live_bytes += std::int64_t(parked_->size);
    requested += std::int64_t(parked_requested_);
    ++live_count;
  }
  std::int64_t pending_bytes = 0;
  for (const Pending& p : pending_) {
    if (p.block->state != BlockState::pending) throw Error("pending list holds a non-pending block");
    pending_bytes += std::int64_t(p.block->size);
  }
  if (stats_.allocated_bytes.get(kAggregatePool).current != live_bytes ||
      stats_.allocation.get(kAggregatePool).current != live_count ||
      stats_.requested_bytes.get(kAggregatePool).current != requested)
    throw Error("allocation statistics differ from the live blocks");
  if (stats_.active_bytes.get(kAggregatePool).current != live_bytes + pending_bytes)
    throw Error("active statistics differ from live plus pending blocks");
}

}  // namespace gpumem::engine
