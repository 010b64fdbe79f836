#include "report/excess.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace gpumem::report {
namespace {
struct Page {
  std::size_t bytes = 0, used = 0, free = 0;
  bool small = false;
};
}  // namespace

ExcessBreakdown explain_excess(const AllocatorSnapshot& s) {
  ExcessBreakdown out;
  out.reserved = s.reserved;
  out.allocated = s.allocated_bytes();
  out.mapped_nowhere = s.free_physical;
  out.parted_pages = s.part_page_physical;
  std::map<DevicePtr, Page> pages;  // by address: each mapping is one page (or a run of them, counted as one)
  for (const SnapshotMapping& m : s.mappings) pages[m.va].bytes = m.bytes;
  std::set<StreamId> streams;
  for (const SnapshotRegion& r : s.regions) {
    streams.insert(r.stream);
    for (const SnapshotBlock& b : r.blocks) {
      if (b.state == SnapshotBlockState::hole) continue;
      const bool used = b.state != SnapshotBlockState::free;
      if (b.state == SnapshotBlockState::pending_free) out.waiting_on_streams += b.size;
      if (r.plain) {
        if (!used) out.plain_free += b.size;
        continue;
      }
      // The block's bytes over the pages it spans.
      auto it = pages.upper_bound(b.addr);
      if (it != pages.begin()) --it;
      for (; it != pages.end() && it->first < b.addr + b.size; ++it) {
        const DevicePtr lo = std::max(b.addr, it->first), hi = std::min(b.addr + b.size, it->first + it->second.bytes);
        if (hi <= lo) continue;
        it->second.small = r.small_pool;
        (used ? it->second.used : it->second.free) += hi - lo;
      }
    }
  }
  out.streams = streams.size();
  for (const auto& [va, p] : pages) {
    if (!p.free) continue;
    ExcessBreakdown::Pool& pool = p.small ? out.small : out.large;
    if (p.used) {
      pool.part_page_free += p.free;
      ++pool.part_pages;
    } else {
      pool.whole_page_free += p.free;
      ++pool.whole_pages;
    }
  }
  return out;
}

}  // namespace gpumem::report
