// Allocator statistics with PyTorch's names and meanings (torch.cuda.memory_stats()).
//
//  allocation / allocated_bytes : blocks handed out and not yet given back by the program
//  active / active_bytes        : allocated blocks plus freed blocks still waiting for other streams
//  segment / reserved_bytes     : physical memory chunks held from the device
//  inactive_split(_bytes)       : free blocks the allocator holds inside its mapped memory
//  requested_bytes              : the sizes the program asked for, before rounding
// Rounding (as PyTorch): a request is rounded up to a multiple of 512 bytes; allocated_bytes counts the
// block set aside for it, which is that rounded size, or the whole free block taken when what would be
// left over is smaller than 512 bytes. requested_bytes counts the request itself.
// Peaks are exact over all streams together (each is the true maximum of the total, not a sum of
// per-stream peaks). Each Stat has current, peak (since the last reset_peak_stats), allocated and freed
// (running totals).
// Index 0 aggregates both pools; 1 is the small pool (requests <= 1 MiB), 2 the large pool.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace gpumem {

struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;
  std::int64_t freed = 0;

  void increase(std::int64_t amount) {
    current += amount;
    allocated += amount;
    if (current > peak) peak = current;
  }
  void decrease(std::int64_t amount) {
    current -= amount;
    freed += amount;
  }
  // Moves current to `value`, counting the change as allocated or freed.
  void set(std::int64_t value) {
    if (value > current) increase(value - current);
    else if (value < current) decrease(current - value);
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

enum PoolKind : int { kAggregatePool = 0, kSmallPool = 1, kLargePool = 2 };
inline constexpr std::size_t kSmallRequestLimit = 1 << 20;  // requests up to 1 MiB are "small"
using StatArray = std::array<Stat, 3>;

struct DeviceStats {
  StatArray allocation, segment, active, inactive_split;
  StatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
  std::int64_t num_alloc_retries = 0;
  std::int64_t num_ooms = 0;
  std::int64_t num_device_alloc = 0;  // physical chunks created / plain segments allocated
  std::int64_t num_device_free = 0;
  std::int64_t num_sync_all_streams = 0;
  std::int64_t max_split_size = -1;
  // gpumem's own counters
  std::int64_t num_maps = 0, num_unmaps = 0, num_stitches = 0;
  std::int64_t num_invalid_frees = 0;
  // Driver calls behind the maps (one per page) and the time spent in them, per kind: create (cuMemCreate),
  // map (cuMemMap), access (cuMemSetAccess), unmap, release, sync (stream / device synchronization).
  struct DriverCalls {
    std::int64_t calls = 0, ns = 0;
  };
  DriverCalls driver_create, driver_map, driver_access, driver_unmap, driver_release, driver_sync;
  // Pages the backend made ahead of need on a thread of its own (calls: pages, ns: that thread's driver
  // time), and how often one was unmapped again unused.
  DriverCalls ahead;
  std::int64_t ahead_unused = 0;
  std::int64_t ahead_held_bytes = 0, ahead_held_peak_bytes = 0;  // device memory reserved bytes do not show

  // Flat "key.pool.metric" -> value, exactly the keys torch.cuda.memory_stats() returns.
  std::map<std::string, std::int64_t> as_map() const;
};

}  // namespace gpumem
