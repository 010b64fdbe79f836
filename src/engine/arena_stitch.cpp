// Stitching and giving memory back: lending the pages behind free ranges, holes, unmapping unused
// mappings. See arena.hpp.
#include <algorithm>
#include <iterator>

#include "engine/arena.hpp"

namespace gpumem::engine {
namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

std::size_t Arena::lend_to_other_stream(std::size_t bytes, std::vector<Piece>& out, bool wait) {
  return lend(bytes, Keep{}, out, wait ? OtherStream::wait : OtherStream::if_idle);
}

bool Arena::stream_idle() const noexcept {
  EventHandle event = 0;
  try {
    event = backend_.record_event(stream_);
  } catch (...) {
    return false;
  }
  bool done = false;
  try {
    done = backend_.event_done(event);
  } catch (...) {
  }
  backend_.release_event(event);
  return done;
}

std::size_t Arena::lend(std::size_t bytes, Keep keep, std::vector<Piece>& out, OtherStream other) {
  struct Candidate {
    Block* block;
    DevicePtr start;
    std::size_t bytes;
  };
  std::vector<Candidate> candidates;
  std::size_t covered = 0;
  // A free range whose whole pages cover the need with at most an eighth to spare is lent alone: most
  // often the last holder of a tensor of this role and size, while the largest ranges stay whole for
  // the requests as large as they are (an LM's logits: fewer pages remapped each step).
  for (std::size_t extra : {std::size_t(0), 2 * granularity_, 16 * granularity_}) {
    Block* b = free_.find(bytes + extra);
    if (!b || keep.has(b) || b->region->plain) continue;
    const DevicePtr start = page_ceil(b->addr), end = page_floor(b->end());
    if (end > start && end - start >= bytes && end - start <= bytes + bytes / 8) {
      candidates.push_back({b, start, end - start});
      covered = end - start;
      break;
    }
  }
  // Else the largest size classes first, only until they cover the need: a stitch costs no full scan.
  if (covered < bytes) free_.for_each_largest_first(granularity_, [&](Block* b) {
    if (keep.has(b) || b->region->plain) return false;
    DevicePtr start = page_ceil(b->addr), end = page_floor(b->end());  // whole pages only
    if (end <= start) return false;
    candidates.push_back({b, start, end - start});
    covered += end - start;
    return covered >= bytes;
  });
  // Fewest map calls: the largest free ranges first, the last one only as far as needed.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.bytes > b.bytes; });
  if (candidates.empty()) return 0;
  // For another stream: asked first whether this stream is done anyway (the caller holds this pool's
  // lock, so every free block here was freed before the question): then no wait holds up the asking
  // thread behind this stream's kernels.
  if (other == OtherStream::if_idle && !stream_idle()) return 0;
  if (other == OtherStream::wait) {
    try {
      backend_.synchronize_stream(stream_);
    } catch (...) {
      return 0;  // cannot tell when the stream is done: lend nothing
    }
  }
  std::size_t lent = 0;
  const std::uint64_t number = note_lend(other != OtherStream::no);
  for (const Candidate& c : candidates) {
    if (lent >= bytes) break;
    std::size_t take = std::min(c.bytes, page_ceil(c.start + round_up(bytes - lent, granularity_)) - c.start);
    collect_physical(c.start, take, out);
    for (auto it = mappings_.lower_bound(c.start); it != mappings_.end() && it->first < c.start + take; ++it)
      it->second.lent = number;
    hub_.emit(EventKind::stitch, c.start, take, 0, stream_);
    carve_hole(c.block, c.start, take);
    mapped_bytes_ -= take;
    lent += take;
  }
  return lent;
}

void Arena::collect_physical(DevicePtr start, std::size_t bytes, std::vector<Piece>& out) const {
  auto it = mappings_.upper_bound(start);
  --it;  // the mapping that holds `start`: usable memory is always mapped
  for (DevicePtr at = start, end = start + bytes; at < end; ++it) {
    const auto& [va, m] = *it;
    std::size_t len = std::min(end, va + m.bytes) - at;
    out.push_back(Piece{m.piece.chunk, m.piece.offset + (at - va), len});
    at += len;
  }
}

DevicePtr Arena::page_floor(DevicePtr p) const {
  auto it = mappings_.upper_bound(p);
  if (it == mappings_.begin()) return p;
  --it;
  return p < it->first + it->second.bytes ? it->first : p;
}

DevicePtr Arena::page_ceil(DevicePtr p) const {
  DevicePtr start = page_floor(p);
  if (start == p) return p;
  return start + mappings_.find(start)->second.bytes;
}

std::vector<Piece> Arena::pieces_behind(DevicePtr start, std::size_t bytes) const {
  for (const auto& r : regions_) {
    if (start >= r->base && start < r->base + r->size && r->plain)
      throw Error("gpumem: this allocation is a plain device segment (no virtual memory): it cannot be shared");
  }
  std::vector<Piece> out;
  collect_physical(start, bytes, out);
  return out;
}

std::size_t Arena::unmap_unused() {
  // Mappings (pages, see map_at_top) under which no block is in use: nothing can read them once this
  // stream is idle. One walk of the blocks beside the mappings, in address order.
  struct Unused {
    Region* region;
    DevicePtr va;
  };
  std::vector<Unused> unused;
  for (const auto& rp : regions_) {
    if (rp->plain) continue;
    Block* b = rp->first;
    for (auto it = mappings_.lower_bound(rp->base); it != mappings_.end() && it->first < rp->base + rp->top; ++it) {
      DevicePtr start = it->first, end = start + it->second.bytes;
      while (b && b->end() <= start) b = b->next;
      bool busy = false;
      for (Block* x = b; x && x->addr < end && !busy; x = x->next)
        busy = x->state == BlockState::allocated || x->state == BlockState::pending || x->state == BlockState::parked;
      if (!busy) unused.push_back({rp.get(), start});
    }
  }
  if (unused.empty()) return 0;
  backend_.synchronize_stream(stream_);
  std::size_t released = 0;
  Region* region = nullptr;
  // Ends at or before the mapping looked at (or is the region's first block): carve_hole never recycles
  // it, since it recycles only the hole itself (merged into the block before it) or a hole after it.
  Block* cursor = nullptr;
  for (const Unused& u : unused) {
    if (u.region != region) region = u.region, cursor = region->first;
    while (cursor && cursor->next && cursor->next->end() <= u.va) cursor = cursor->next;
    auto it = mappings_.find(u.va);
    const Mapping m = it->second;
    const DevicePtr end = u.va + m.bytes;
    // Free (not lent) parts go back to the physical pool and become holes; lent parts (holes already)
    // and shared parts belong to the place they were stitched into (a shared part becomes a hole).
    for (Block* b = cursor; b && b->addr < end;) {
      if (b->end() > u.va && b->state == BlockState::shared) {
        shared_to_hole(b);
        b = cursor;
        continue;
      }
      if (b->end() <= u.va || b->state != BlockState::free) {
        b = b->next;
        continue;
      }
      DevicePtr start = std::max(b->addr, u.va), stop = std::min(b->end(), end);
      physical_.give_piece(Piece{m.piece.chunk, m.piece.offset + (start - u.va), stop - start});
      carve_hole(b, start, stop - start);
      mapped_bytes_ -= stop - start;
      released += stop - start;
      b = cursor;  // carved parts are holes now: the walk skips them
    }
    unmap_mapping(it);
  }
  return released;
}

void Arena::unmap_done_lends() {
  // Packing: kept close (a KV cache under a limit remaps all the time). Otherwise loose, for old mappings
  // under holes are often filled again soon (a stream's pool re-lent its pages), but bounded: pages lent
  // back and forth between two pools left one mapping per round, and each growth walked them all.
  const bool close = packing();
  const std::size_t limit =
      (close ? 2 : 16) * std::max(mapped_bytes_ / granularity_, mappings_after_sweep_) + (close ? 64 : 4096);
  if (mappings_.size() <= limit) return;
  const std::uint64_t done = lends_done();
  for (const auto& rp : regions_) {
    if (rp->plain) continue;
    const Block* b = rp->first;
    for (auto it = mappings_.lower_bound(rp->base); it != mappings_.end() && it->first < rp->base + rp->top;) {
      const DevicePtr start = it->first, end = start + it->second.bytes;
      while (b && b->end() <= start) b = b->next;
      const bool in_hole = b && b->state == BlockState::hole && b->addr <= start && b->end() >= end;
      it = in_hole && it->second.lent && it->second.lent <= done ? unmap_mapping(it) : std::next(it);
    }
  }
  mappings_after_sweep_ = mappings_.size();
}

std::map<DevicePtr, Arena::Mapping>::iterator Arena::unmap_mapping(std::map<DevicePtr, Mapping>::iterator it) noexcept {
  hub_.emit(EventKind::segment_unmap, it->first, it->second.bytes, 0, stream_);
  physical_.unmap(it->first, it->second.piece);
  return mappings_.erase(it);
}

Block* Arena::block_containing(const Region& r, DevicePtr p) const noexcept {
  for (Block* b = r.first; b; b = b->next)
    if (p >= b->addr && p < b->end()) return b;
  return nullptr;
}

Region* Arena::region_of(DevicePtr p) const noexcept {
  for (const auto& r : regions_)
    if (p >= r->base && p < r->base + r->size) return r.get();
  return nullptr;
}

Block* Arena::carve_hole(Block* b, DevicePtr hole_addr, std::size_t bytes, BlockState state, DevicePtr partner) {
  free_.remove(b);
  DevicePtr end = b->end();
  Block* right = nullptr;
  if (hole_addr + bytes < end) {
    right = recycler_.make();
    right->addr = hole_addr + bytes;
    right->size = end - right->addr;
    right->region = b->region;
    right->state = BlockState::free;
    insert_after(b, right);
    free_.insert(right);
  }
  Block* hole = b;
  if (hole_addr > b->addr) {
    b->size = hole_addr - b->addr;
    free_.insert(b);
    hole = recycler_.make();
    hole->region = b->region;
    insert_after(b, hole);
  }
  hole->addr = hole_addr;
  hole->size = bytes;
  hole->state = state;
  hole->requested = partner;
  if (state == BlockState::hole) shared_to_hole(hole);  // merges it with the holes beside it
  return right;
}

void Arena::shared_to_hole(Block* hole) {
  hole->state = BlockState::hole;
  if (hole->prev && hole->prev->state == BlockState::hole) {
    Block* p = hole->prev;
    p->size += hole->size;
    unlink(hole);
    recycler_.recycle(hole);
    hole = p;
  }
  if (hole->next && hole->next->state == BlockState::hole) {
    Block* n = hole->next;
    hole->size += n->size;
    unlink(n);
    recycler_.recycle(n);
  }
}

std::size_t Arena::release_cached() {
  std::lock_guard lock(physical_.mutex());
  std::size_t released = unmap_unused();
  for (auto it = regions_.begin(); it != regions_.end();) {
    Region& r = **it;
    if (r.plain && r.first == r.last && r.first->state == BlockState::free) {
      free_.remove(r.first);
      recycler_.recycle(r.first);
      hub_.emit(EventKind::segment_free, r.base, r.size, 0, stream_);
      physical_.free_segment(r.base, r.size, small_);
      released += r.size;
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

}  // namespace gpumem::engine
