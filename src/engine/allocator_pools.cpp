// Allocator's private pools (CUDA graphs, MemPool): the registry is engine/private_pools.hpp; these are the
// Allocator methods over it, with what releasing and restoring a pool does to its stream pools.
#include <algorithm>

#include "engine/allocator_impl.hpp"

namespace gpumem {

void Allocator::begin_allocate_to_pool(PoolId pool, PoolFilter filter) { impl_->privates.begin(pool, std::move(filter)); }
void Allocator::end_allocate_to_pool(PoolId pool) noexcept { impl_->privates.end(pool); }
void Allocator::create_or_incref_pool(PoolId pool) { impl_->privates.incref(pool); }
int Allocator::pool_use_count(PoolId pool) const { return impl_->privates.use_count(pool); }
void Allocator::set_pool_use_on_oom(PoolId pool, bool on) { impl_->privates.set_use_on_oom(pool, on); }

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

namespace {
// What the pool's streams hold at addr, for the error of a restore that cannot place a block there.
std::string describe_in_pools(const std::vector<StreamPool*>& pools, DevicePtr addr) {
  std::string there;
  for (StreamPool* p : pools) {
    std::lock_guard lock(p->lock());
    if (std::string d = p->describe_at(addr); !d.empty()) there += (there.empty() ? "" : "; ") + d;
  }
  return there.empty() ? "no block of the pool" : there;
}
}  // namespace

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
    // Blocks freed while other streams used them wait for those streams; the checkpoint may hold them
    // (graph trees restore after such frees): wait now, so they are free to take.
    if (p->has_pending()) p->process_pending(true);
  }
  for (const PoolCheckpoint::Entry& e : cp.blocks) {  // then allocate what it holds and is free now
    auto owner = std::find_if(pools.begin(), pools.end(), [&](StreamPool* p) { return p->stream() == e.stream; });
    if (owner == pools.end())
      throw Error("gpumem: cannot restore a pool checkpoint: its stream no longer allocates in the pool");
    bool placed = false;
    {
      std::lock_guard lock((*owner)->lock());
      if (Block* live = (*owner)->find_live(e.addr); live && live->size == e.size) continue;
      placed = (*owner)->allocate_at(e.addr, e.size, e.requested) != nullptr;
    }
    if (!placed)
      throw Error("gpumem: cannot restore a pool checkpoint: " + format_bytes(e.size) + " at " +
                  std::to_string(e.addr) + " on stream " + std::to_string(e.stream) +
                  " is no longer free in the pool (there: " + describe_in_pools(pools, e.addr) + ")");
    allocated.push_back(e.addr);
  }
  return allocated;
}

}  // namespace gpumem
