#include <algorithm>

#include "engine/snapshot_builder.hpp"

namespace gpumem {

const char* snapshot_block_state_name(SnapshotBlockState state) noexcept {
  switch (state) {
    case SnapshotBlockState::allocated: return "allocated";
    case SnapshotBlockState::pending_free: return "pending_free";
    case SnapshotBlockState::free: return "free";
    case SnapshotBlockState::hole: return "hole";
  }
  return "unknown";
}

std::size_t AllocatorSnapshot::allocated_bytes() const {
  std::size_t sum = 0;
  for (const SnapshotRegion& r : regions)
    for (const SnapshotBlock& b : r.blocks)
      if (b.state == SnapshotBlockState::allocated) sum += b.size;
  return sum;
}

namespace engine {
namespace {

SnapshotBlockState state_of(const Block& b) {
  switch (b.state) {
    case BlockState::allocated: return SnapshotBlockState::allocated;
    case BlockState::pending: return SnapshotBlockState::pending_free;
    case BlockState::hole:
    case BlockState::shared: return SnapshotBlockState::hole;
    case BlockState::free:
    case BlockState::parked: return SnapshotBlockState::free;
  }
  return SnapshotBlockState::free;
}

}  // namespace

void describe_pool(const StreamPool& pool, AllocatorSnapshot& out) {
  for (bool small : {true, false}) {
    const Arena& arena = pool.arena(small);
    arena.for_each_region([&](const Region& r) {
      SnapshotRegion region;
      region.base = r.base;
      region.size = r.size;
      region.mapped = r.plain ? r.size : r.top;
      region.stream = pool.stream();
      region.small_pool = small;
      region.plain = r.plain;
      for (const Block* b = r.first; b; b = b->next) {
        const SnapshotBlock block{b->addr, b->size, b->requested, state_of(*b)};
        // The block freed last waits unmerged (a fast path): shown merged with its free neighbours, as it
        // is once returned and as PyTorch's snapshots show free blocks (never two side by side).
        SnapshotBlock* last = region.blocks.empty() ? nullptr : &region.blocks.back();
        if (last && last->state == SnapshotBlockState::free && block.state == SnapshotBlockState::free &&
            last->addr + last->size == block.addr) {
          last->size += block.size;
          last->requested = 0;
          continue;
        }
        region.blocks.push_back(block);
      }
      out.regions.push_back(std::move(region));
    });
    arena.for_each_mapping([&](DevicePtr va, std::size_t bytes, std::size_t chunk, std::size_t offset) {
      out.mappings.push_back(SnapshotMapping{va, bytes, chunk, offset});
    });
  }
}

void sort_snapshot(AllocatorSnapshot& snap) {
  std::sort(snap.regions.begin(), snap.regions.end(),
            [](const SnapshotRegion& a, const SnapshotRegion& b) { return a.base < b.base; });
  std::sort(snap.mappings.begin(), snap.mappings.end(),
            [](const SnapshotMapping& a, const SnapshotMapping& b) { return a.va < b.va; });
}

}  // namespace engine
}  // namespace gpumem
