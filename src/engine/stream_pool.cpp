#include "engine/stream_pool.hpp"

#include <algorithm>

namespace gpumem::engine {
namespace {
constexpr std::size_t kRound = 512;
}

StreamPool::StreamPool(Backend& backend, PhysicalMemory& physical, const AllocatorConfig& config, StreamId stream)
    : stream_(stream), backend_(backend), small_(backend, physical, recycler_, config, stream, true),
      large_(backend, physical, recycler_, config, stream, false) {}

StreamPool::~StreamPool() {
  for (Pending& p : pending_)
    for (EventHandle e : p.events) backend_.release_event(e);
}

Block* StreamPool::allocate(std::size_t request) {
  std::size_t size = (request + kRound - 1) / kRound * kRound;
  Arena& arena = request <= kSmallRequestLimit ? small_ : large_;
  if (!pending_.empty()) process_pending(false);
  Block* b = arena.find(size);
  if (!b) b = arena.grow(size);
  b = arena.take(b, size);
  b->requested = request;
  b->small = arena.small_pool();
  try {
    live_.insert(b->addr, b);
  } catch (...) {
    arena.release(b);
    throw;
  }
  account(b, true);
  account_active(b, true);
  refresh_inactive_split();
  return b;
}

bool StreamPool::deallocate(DevicePtr ptr, StreamId free_stream) noexcept {
  Block* b = live_.find(ptr);
  if (!b) return false;
  live_.erase(ptr);
  account(b, false);
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
    return_block(b);
    return true;
  }
  b->state = BlockState::pending;
  Pending p{b, {}, false};
  try {
    p.events.reserve(b->other_streams->size());
    for (StreamId s : *b->other_streams) p.events.push_back(backend_.record_event(s));
    pending_.push_back(std::move(p));
  } catch (...) {
    for (EventHandle e : p.events) backend_.release_event(e);
    try {
      pending_.push_back(Pending{b, {}, true});
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

void StreamPool::process_pending(bool wait) noexcept {
  bool synced = false;
  if (wait) {
    try {
      backend_.synchronize();
      synced = true;
    } catch (...) {
    }
  }
  auto done = [&](Pending& p) {
    if (synced) return true;
    if (p.needs_sync) return false;
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
      return_block(p.block);
    } else {
      pending_[kept++] = std::move(p);
    }
  }
  pending_.resize(kept);
}

void StreamPool::return_block(Block* b) noexcept {
  account_active(b, false);
  (b->small ? small_ : large_).release(b);
  refresh_inactive_split();
}

std::size_t StreamPool::release_cached() {
  std::size_t released = small_.release_cached() + large_.release_cached();
  refresh_inactive_split();
  return released;
}

bool StreamPool::is_freed_block(DevicePtr ptr) const noexcept {
  for (const Arena* a : {&small_, &large_}) {
    if (!a->owns(ptr)) continue;
    bool found = false;
    a->for_each_block([&](const Region&, const Block* b) {
      if (b->addr == ptr && (b->state == BlockState::free || b->state == BlockState::pending)) found = true;
    });
    return found;
  }
  return false;
}

void StreamPool::account(Block* b, bool allocated) noexcept {
  int kind = b->small ? kSmallPool : kLargePool;
  for (int k : {int(kAggregatePool), kind}) {
    if (allocated) {
      stats_.allocation[k].increase(1);
      stats_.allocated_bytes[k].increase(std::int64_t(b->size));
      stats_.requested_bytes[k].increase(std::int64_t(b->requested));
    } else {
      stats_.allocation[k].decrease(1);
      stats_.allocated_bytes[k].decrease(std::int64_t(b->size));
      stats_.requested_bytes[k].decrease(std::int64_t(b->requested));
    }
  }
}

void StreamPool::account_active(Block* b, bool active) noexcept {
  int kind = b->small ? kSmallPool : kLargePool;
  for (int k : {int(kAggregatePool), kind}) {
    if (active) {
      stats_.active[k].increase(1);
      stats_.active_bytes[k].increase(std::int64_t(b->size));
    } else {
      stats_.active[k].decrease(1);
      stats_.active_bytes[k].decrease(std::int64_t(b->size));
    }
  }
}

void StreamPool::refresh_inactive_split() noexcept {
  auto set = [](Stat& s, std::int64_t value) {
    if (value > s.current) s.increase(value - s.current);
    else if (value < s.current) s.decrease(s.current - value);
  };
  set(stats_.inactive_split[kSmallPool], std::int64_t(small_.free_blocks()));
  set(stats_.inactive_split[kLargePool], std::int64_t(large_.free_blocks()));
  set(stats_.inactive_split[kAggregatePool], std::int64_t(small_.free_blocks() + large_.free_blocks()));
  set(stats_.inactive_split_bytes[kSmallPool], std::int64_t(small_.free_bytes()));
  set(stats_.inactive_split_bytes[kLargePool], std::int64_t(large_.free_bytes()));
  set(stats_.inactive_split_bytes[kAggregatePool], std::int64_t(small_.free_bytes() + large_.free_bytes()));
}

void StreamPool::reset_peaks() noexcept {
  for (StatArray* a : {&stats_.allocation, &stats_.active, &stats_.inactive_split, &stats_.allocated_bytes,
                       &stats_.active_bytes, &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (Stat& s : *a) s.reset_peak();
}

void StreamPool::reset_accumulated() noexcept {
  for (StatArray* a : {&stats_.allocation, &stats_.active, &stats_.inactive_split, &stats_.allocated_bytes,
                       &stats_.active_bytes, &stats_.inactive_split_bytes, &stats_.requested_bytes})
    for (Stat& s : *a) s.reset_accumulated();
}

std::size_t StreamPool::largest_free() const noexcept {
  return std::max(small_.largest_free(), large_.largest_free());
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
  std::int64_t pending_bytes = 0;
  for (const Pending& p : pending_) {
    if (p.block->state != BlockState::pending) throw Error("pending list holds a non-pending block");
    pending_bytes += std::int64_t(p.block->size);
  }
  if (stats_.allocated_bytes[kAggregatePool].current != live_bytes ||
      stats_.allocation[kAggregatePool].current != live_count ||
      stats_.requested_bytes[kAggregatePool].current != requested)
    throw Error("allocation statistics differ from the live blocks");
  if (stats_.active_bytes[kAggregatePool].current != live_bytes + pending_bytes)
    throw Error("active statistics differ from live plus pending blocks");
}

}  // namespace gpumem::engine
