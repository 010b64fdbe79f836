#include "engine/private_pools.hpp"

#include <algorithm>
#include <string>

namespace gpumem::engine {
namespace {
std::string pool_name(PoolId id) { return "(" + std::to_string(id.first) + ", " + std::to_string(id.second) + ")"; }
}  // namespace

PrivatePools::Pool* PrivatePools::find(PoolId id) {
  for (Pool& p : pools_)
    if (p.id == id) return &p;
  return nullptr;
}

const PrivatePools::Pool* PrivatePools::find(PoolId id) const {
  for (const Pool& p : pools_)
    if (p.id == id) return &p;
  return nullptr;
}

PrivatePools::Pool& PrivatePools::find_or_create(PoolId id) {
  if (Pool* p = find(id)) return *p;
  pools_.push_back(Pool{id, 0, {}, false});
  return pools_.back();
}

StreamPool* PrivatePools::route(StreamId stream) {
  std::lock_guard lock(mutex_);
  for (Capture& c : routing_) {
    if (!c.filter(stream)) continue;
    Pool& pool = find_or_create(c.id);
    for (StreamPool* sp : pool.pools)
      if (sp->stream() == stream) return sp;
    StreamPool* sp = nullptr;
    auto spare = std::find_if(spares_.begin(), spares_.end(), [&](StreamPool* s) { return s->stream() == stream; });
    if (spare != spares_.end()) {
      sp = *spare;
      spares_.erase(spare);
    } else {
      sp = make_pool_(stream);
    }
    pool.pools.push_back(sp);
    return sp;
  }
  return nullptr;
}

void PrivatePools::begin(PoolId id, PoolFilter filter) {
  if (!filter) throw Error("gpumem: begin_allocate_to_pool needs a filter");
  std::lock_guard lock(mutex_);
  for (const Capture& c : routing_)
    if (c.id == id) throw Error("gpumem: private pool " + pool_name(id) + " is already being allocated to");
  routing_.push_back(Capture{id, std::move(filter)});
  ++find_or_create(id).use_count;
  captures_.fetch_add(1, std::memory_order_relaxed);
}

void PrivatePools::end(PoolId id) noexcept {
  std::lock_guard lock(mutex_);
  auto it = std::find_if(routing_.begin(), routing_.end(), [&](const Capture& c) { return c.id == id; });
  if (it == routing_.end()) return;
  routing_.erase(it);
  captures_.fetch_sub(1, std::memory_order_relaxed);
}

void PrivatePools::incref(PoolId id) {
  std::lock_guard lock(mutex_);
  ++find_or_create(id).use_count;
}

bool PrivatePools::release(PoolId id) noexcept {
  std::lock_guard lock(mutex_);
  Pool* p = find(id);
  if (!p || p->use_count == 0) return false;
  if (--p->use_count > 0) return false;
  p->use_on_oom = false;  // a released pool serves no fallback (PyTorch's ~MemPool does the same)
  return true;
}

int PrivatePools::use_count(PoolId id) const {
  std::lock_guard lock(mutex_);
  const Pool* p = find(id);
  return p ? p->use_count : 0;
}

std::vector<StreamPool*> PrivatePools::stream_pools(PoolId id) const {
  std::lock_guard lock(mutex_);
  const Pool* p = find(id);
  return p ? p->pools : std::vector<StreamPool*>{};
}

std::vector<StreamPool*> PrivatePools::in_use() const {
  std::lock_guard lock(mutex_);
  std::vector<StreamPool*> out;
  for (const Pool& p : pools_)
    if (p.use_count > 0) out.insert(out.end(), p.pools.begin(), p.pools.end());
  return out;
}

void PrivatePools::set_use_on_oom(PoolId id, bool on) {
  std::lock_guard lock(mutex_);
  Pool* p = find(id);
  if (!p || p->use_count == 0) throw Error("gpumem: private pool " + pool_name(id) + " is not in use");
  p->use_on_oom = on;
}

Block* PrivatePools::take_from_oom_pools(StreamId stream, const std::function<Block*(StreamPool&)>& take) {
  std::lock_guard lock(mutex_);
  for (const Pool& p : pools_) {
    if (!p.use_on_oom || p.use_count == 0) continue;
    for (StreamPool* sp : p.pools) {
      if (sp->stream() != stream) continue;
      std::lock_guard pool_lock(sp->lock());
      if (Block* b = take(*sp)) return b;
    }
  }
  return nullptr;
}

void PrivatePools::retire_empty() noexcept {
  std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < pools_.size();) {
    Pool& p = pools_[i];
    bool empty = p.use_count == 0 && std::all_of(p.pools.begin(), p.pools.end(), [](StreamPool* sp) {
                   std::lock_guard pool_lock(sp->lock());
                   return sp->live_blocks() == 0 && !sp->has_pending() && sp->mapped_bytes() == 0;
                 });
    if (!empty) {
      ++i;
      continue;
    }
    try {
      spares_.insert(spares_.end(), p.pools.begin(), p.pools.end());
    } catch (...) {
      ++i;  // no room to keep the spares: the pool stays registered (empty), nothing is lost
      continue;
    }
    pools_.erase(pools_.begin() + std::ptrdiff_t(i));
  }
}

}  // namespace gpumem::engine
