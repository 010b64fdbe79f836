// A consistent picture of one allocator's memory: plain data, no formatting (renderers live in
// src/report). Allocator::snapshot() takes it under every pool lock and the physical-memory lock, so
// blocks, mappings and totals describe one moment.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpumem/backend.hpp"
#include "gpumem/stats.hpp"

namespace gpumem {

enum class SnapshotBlockState : std::uint8_t {
  allocated,     // handed out to the program
  pending_free,  // freed by the program, waiting for other streams (record_stream)
  free,          // cached: reusable
  hole,          // addresses whose physical pages were lent elsewhere or unmapped, or whose bytes a block
                 // at another address of the same page uses (VMM only)
};
const char* snapshot_block_state_name(SnapshotBlockState state) noexcept;

struct SnapshotBlock {
  DevicePtr addr = 0;
  std::size_t size = 0;
  std::size_t requested = 0;  // what the program asked for; 0 unless allocated or pending
  SnapshotBlockState state = SnapshotBlockState::free;
};

// A region of address space of one stream pool: one reserved virtual range (VMM), whose first
// `mapped` bytes are in use, or one plain device allocation.
struct SnapshotRegion {
  DevicePtr base = 0;
  std::size_t size = 0;    // reserved address space (plain: the allocation)
  std::size_t mapped = 0;  // bytes from base covered by blocks (including holes)
  StreamId stream = 0;
  bool small_pool = false;
  bool plain = false;
  std::vector<SnapshotBlock> blocks;  // address order, covering [base, base + mapped)
};

struct SnapshotMapping {
  DevicePtr va = 0;
  std::size_t bytes = 0;
  std::size_t chunk = 0;   // index of the physical chunk
  std::size_t offset = 0;  // offset in the chunk
};

struct AllocatorSnapshot {
  int device = 0;
  std::string backend;
  std::size_t granularity = 0;
  std::size_t limit = 0;  // 0: none
  std::size_t reserved = 0;
  std::size_t free_physical = 0;  // reserved bytes mapped nowhere (stitchable)
  // Reserved bytes given back in part of a page whose other part is still mapped (a page once mapped at
  // two addresses): usable again once the rest of their page comes back.
  std::size_t part_page_physical = 0;
  DeviceStats stats;
  std::vector<SnapshotRegion> regions;
  std::vector<SnapshotMapping> mappings;

  std::size_t allocated_bytes() const;  // sum of allocated blocks
};

}  // namespace gpumem
