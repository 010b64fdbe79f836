// Arena::check_invariants: the whole block structure checked against the free index and mappings.
#include <string>

#include "engine/arena.hpp"

namespace gpumem::engine {
namespace {
constexpr std::size_t kMinBlock = 512;
}  // namespace

void Arena::check_invariants() const {
  auto fail = [](const std::string& what) { throw Error("arena invariant broken: " + what); };
  std::size_t free_count = 0, free_bytes = 0, backed = 0;
  for (const auto& rp : regions_) {
    const Region& r = *rp;
    DevicePtr expect = r.base;
    for (Block* b = r.first; b; b = b->next) {
      if (b->region != &r) fail("block in the wrong region");
      if (b->addr != expect) fail("blocks are not contiguous");
      if (b->size == 0 || b->size % kMinBlock) fail("block size not a positive multiple of 512");
      if (b->next && b->next->prev != b) fail("broken back link");
      if (!b->next && r.last != b) fail("region's last block is wrong");
      if (b->state == BlockState::free) {
        ++free_count;
        free_bytes += b->size;
        if (b->next && b->next->state == BlockState::free) fail("two adjacent free blocks");
      }
      if (b->state == BlockState::hole) {
        if (b->next && b->next->state == BlockState::hole) fail("two adjacent holes");
      } else {
        if (b->state != BlockState::shared) backed += b->size;
        else if (r.plain) fail("a shared block in a plain segment");
        if (!r.plain && !covered(b->addr, b->size)) fail("usable memory is not mapped");
      }
      expect = b->end();
    }
    if (expect != r.base + r.top) fail("blocks do not end at the region's top");
  }
  if (free_count != free_.count() || free_bytes != free_.bytes()) fail("free index out of sync with blocks");
  std::size_t plain_bytes = 0;
  for (const auto& r : regions_)
    if (r->plain) plain_bytes += r->size;
  if (backed != mapped_bytes_ + plain_bytes) fail("usable block bytes differ from the mapped usable bytes");
}

bool Arena::covered(DevicePtr start, std::size_t bytes) const {
  auto it = mappings_.upper_bound(start);
  if (it == mappings_.begin()) return false;
  --it;
  for (DevicePtr at = start, end = start + bytes; at < end; ++it) {
    if (it == mappings_.end() || it->first > at || it->first + it->second.bytes <= at) return false;
    at = it->first + it->second.bytes;
  }
  return true;
}

}  // namespace gpumem::engine
