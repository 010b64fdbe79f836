#include "engine/arena.hpp"

#include <algorithm>
#include <string>

namespace gpumem::engine {
namespace {
constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kMaxQuantum = 64 * kMiB;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

Arena::Arena(Backend& backend, PhysicalMemory& physical, BlockRecycler& recycler, const AllocatorConfig& config,
             StreamId stream, bool small_pool)
    : backend_(backend), physical_(physical), recycler_(recycler), config_(config), stream_(stream),
      small_(small_pool), granularity_(backend.granularity()) {}

Arena::~Arena() {
  std::lock_guard lock(physical_.mutex());
  for (auto& [va, m] : mappings_) physical_.unmap(va, m.piece);  // chunks are released by PhysicalMemory
  for (auto& r : regions_) {
    for (Block* b = r->first; b; b = b->next) {
      delete b->other_streams;
      b->other_streams = nullptr;
    }
    if (r->plain) physical_.free_segment(r->base, r->size, small_);
    else backend_.release_range(r->base, r->size);
  }
}

std::size_t Arena::chunk_quantum() const {
  if (config_.min_chunk_bytes) return round_up(config_.min_chunk_bytes, granularity_);
  // Grow in steps of 1/256 of what is reserved: few device calls while memory ramps up, and never
  // more than 0.4% taken beyond the need when the program reaches its peak.
  if (small_) return granularity_;  // small blocks are few bytes in all: grow page by page
  std::size_t q = std::clamp(physical_.reserved() / 256, granularity_, kMaxQuantum);
  return round_up(q, granularity_);
}

Block* Arena::grow(std::size_t size) {
  bool plain = config_.force_plain || !backend_.supports_virtual_memory();
  return plain ? grow_plain(size) : grow_virtual(size);
}

Region& Arena::new_region(std::size_t min_bytes) {
  std::size_t va = config_.pool_va_bytes;
  if (!va) {
    std::size_t total = backend_.mem_info().total;
    va = small_ ? std::max(total / 8, std::size_t(1) << 30) : total;
  }
  va = round_up(std::max(va, min_bytes), granularity_);
  auto r = std::make_unique<Region>();
  {
    std::lock_guard lock(physical_.mutex());  // backend memory calls run one at a time (backend.hpp)
    r->base = backend_.reserve(va);
  }
  r->size = va;
  regions_.push_back(std::move(r));
  return *regions_.back();
}

Block* Arena::grow_virtual(std::size_t size) {
  Region* r = regions_.empty() ? nullptr : regions_.back().get();
  Block* tail = nullptr;
  if (r && r->last && r->last->state == BlockState::free && r->last->end() == r->base + r->top) tail = r->last;
  std::size_t need = round_up(size - (tail ? std::min(tail->size, size) : 0), granularity_);
  if (!r || r->top + need > r->size) {
    r = &new_region(round_up(size, granularity_));
    tail = nullptr;
    need = round_up(size, granularity_);
  }
  std::lock_guard lock(physical_.mutex());
  std::vector<Piece> pieces;
  std::size_t got = physical_.take_pieces(need, pieces);
  // Stitch when memory is tight: most of what is reserved is in use, or the limit is near. With much
  // mapped memory free, the miss is fragmentation that growing cures for good, while stitching would
  // cost map calls on every such miss (a random workload never settles).
  std::size_t free_mapped = free_.bytes() + (sibling_ ? sibling_->free_bytes() : 0);
  bool tight = double(free_mapped) <= config_.stitch_free_fraction * double(physical_.reserved()) ||
               physical_.would_exceed_limit(need - got);
  auto stitch = [&] {
    if (got < need) got += lend(need - got, tail, pieces);
    if (got < need && sibling_) got += sibling_->lend(need - got, nullptr, pieces);
  };
  if (tight) stitch();
  if (got < need) {
    try {
      pieces.push_back(create_for(need - got, r->size - r->top - got));
      got = need;
    } catch (const OutOfMemoryError&) {
      if (!tight) stitch();  // the device is full: stitching is all that is left
      if (got < need) {
        for (const Piece& p : pieces) physical_.give_piece(p);
        throw;
      }
    } catch (...) {
      for (const Piece& p : pieces) physical_.give_piece(p);
      throw;
    }
  }
  return map_at_top(*r, tail, pieces);
}

Piece Arena::create_for(std::size_t want, std::size_t room) {
  std::size_t chunk = std::min(std::max(want, chunk_quantum()), room);
  if (physical_.would_exceed_limit(chunk)) chunk = want;
  try {
    return physical_.create_chunk(chunk, small_);
  } catch (const OutOfMemoryError&) {
    if (chunk == want) throw;
    return physical_.create_chunk(want, small_);
  }
}

Block* Arena::map_at_top(Region& r, Block* tail, std::vector<Piece>& pieces) {
  // One map call per run of consecutive bytes of one chunk (pieces lent from one place are often one
  // run), cut into map_unit_bytes units if configured.
  // The order of pieces under the new addresses does not matter: sorted, neighbours in a chunk merge.
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.offset < b.offset;
  });
  std::vector<Piece> runs;
  for (const Piece& p : pieces) {
    if (!runs.empty() && runs.back().chunk == p.chunk && runs.back().offset + runs.back().bytes == p.offset)
      runs.back().bytes += p.bytes;
    else
      runs.push_back(p);
  }
  std::size_t unit = config_.map_unit_bytes ? round_up(config_.map_unit_bytes, granularity_) : SIZE_MAX;
  std::vector<Piece> units;
  for (const Piece& p : runs)
    for (std::size_t off = 0; off < p.bytes; off += unit)
      units.push_back(Piece{p.chunk, p.offset + off, std::min(unit, p.bytes - off)});
  DevicePtr at = r.base + r.top;
  std::size_t mapped = 0, i = 0;
  try {
    for (; i < units.size(); ++i) {
      physical_.map(at + mapped, units[i]);
      mappings_.emplace(at + mapped, Mapping{units[i].bytes, units[i]});
      mapped += units[i].bytes;
    }
  } catch (...) {
    for (; i < units.size(); ++i) physical_.give_piece(units[i]);
    if (mapped) extend_top(r, tail, mapped);
    throw;
  }
  return extend_top(r, tail, mapped);
}

Block* Arena::extend_top(Region& r, Block* tail, std::size_t bytes) {
  DevicePtr at = r.base + r.top;
  r.top += bytes;
  mapped_bytes_ += bytes;
  if (tail) {
    free_.remove(tail);
    tail->size += bytes;
    free_.insert(tail);
    return tail;
  }
  Block* b = recycler_.make();
  b->addr = at;
  b->size = bytes;
  b->region = &r;
  b->state = BlockState::free;
  append_block(r, b);
  free_.insert(b);
  return b;
}

std::size_t Arena::lend(std::size_t bytes, const Block* keep, std::vector<Piece>& out) {
  struct Candidate {
    Block* block;
    DevicePtr start;
    std::size_t bytes;
  };
  std::vector<Candidate> candidates;
  free_.for_each_at_least(granularity_, [&](Block* b) {
    if (b == keep || b->region->plain) return;
    DevicePtr start = round_up(b->addr, granularity_), end = b->end() / granularity_ * granularity_;
    if (end > start) candidates.push_back({b, start, end - start});
  });
  // Fewest map calls: the largest free ranges first, the last one only as far as needed.
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.bytes > b.bytes; });
  std::size_t lent = 0;
  for (const Candidate& c : candidates) {
    if (lent >= bytes) break;
    std::size_t take = std::min(c.bytes, round_up(bytes - lent, granularity_));
    collect_physical(c.start, take, out);
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

std::size_t Arena::unmap_unused() {
  // Mappings under which no block is in use: nothing can read them once this stream is idle.
  std::vector<DevicePtr> unused;
  for (const auto& rp : regions_) {
    if (rp->plain) continue;
    Block* b = rp->first;
    for (auto it = mappings_.lower_bound(rp->base); it != mappings_.end() && it->first < rp->base + rp->top; ++it) {
      DevicePtr start = it->first, end = start + it->second.bytes;
      while (b && b->end() <= start) b = b->next;
      bool busy = false;
      for (Block* x = b; x && x->addr < end && !busy; x = x->next)
        busy = x->state != BlockState::free && x->state != BlockState::hole;
      if (!busy) unused.push_back(start);
    }
  }
  if (unused.empty()) return 0;
  backend_.synchronize_stream(stream_);
  std::size_t released = 0;
  for (DevicePtr va : unused) {
    auto it = mappings_.find(va);
    const Mapping m = it->second;
    Region* r = region_of(va);
    // Free (not lent) parts go back to the physical pool and become holes; lent parts (holes already)
    // belong to the place they were stitched into.
    std::vector<std::pair<DevicePtr, std::size_t>> free_parts;
    for (Block* b = r->first; b && b->addr < va + m.bytes; b = b->next) {
      if (b->state != BlockState::free || b->end() <= va) continue;
      DevicePtr start = std::max(b->addr, va), end = std::min(b->end(), va + m.bytes);
      free_parts.emplace_back(start, end - start);
    }
    for (auto [start, bytes] : free_parts) {
      physical_.give_piece(Piece{m.piece.chunk, m.piece.offset + (start - va), bytes});
      carve_hole(block_containing(*r, start), start, bytes);
      mapped_bytes_ -= bytes;
      released += bytes;
    }
    physical_.unmap(va, m.piece);
    mappings_.erase(it);
  }
  return released;
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

Block* Arena::carve_hole(Block* b, DevicePtr hole_addr, std::size_t bytes) {
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
  return right;
}

Block* Arena::grow_plain(std::size_t size) {
  // PyTorch's segment sizes: 2 MiB for small requests, 20 MiB up to 10 MiB, else the request rounded.
  std::size_t exact = round_up(size, granularity_);
  std::size_t segment = small_ ? std::max(exact, 2 * kMiB) : (size < 10 * kMiB ? 20 * kMiB : exact);
  segment = round_up(segment, granularity_);
  DevicePtr base;
  {
    std::lock_guard lock(physical_.mutex());
    try {
      base = physical_.allocate_segment(segment, small_);
    } catch (const OutOfMemoryError&) {
      if (segment == exact) throw;
      segment = exact;
      base = physical_.allocate_segment(segment, small_);
    }
  }
  auto r = std::make_unique<Region>();
  r->base = base;
  r->size = r->top = segment;
  r->plain = true;
  regions_.push_back(std::move(r));
  Block* b = recycler_.make();
  b->addr = base;
  b->size = segment;
  b->region = regions_.back().get();
  append_block(*regions_.back(), b);
  free_.insert(b);
  return b;
}

Block* Arena::take(Block* b, std::size_t size) {
  if (b->size - size < kMinBlock) {
    free_.remove(b);
    b->state = BlockState::allocated;
    return b;
  }
  // The free block keeps the rest (often without leaving its size class); a new record takes the front.
  Block* front = recycler_.make();
  front->addr = b->addr;
  front->size = size;
  front->region = b->region;
  front->state = BlockState::allocated;
  front->prev = b->prev;
  front->next = b;
  if (b->prev) b->prev->next = front;
  else b->region->first = front;
  b->prev = front;
  free_.resize(b, b->addr + size, b->size - size);
  return front;
}

void Arena::release(Block* b) noexcept {
  b->requested = 0;
  delete b->other_streams;
  b->other_streams = nullptr;
  Block* prev = (b->prev && b->prev->state == BlockState::free) ? b->prev : nullptr;
  Block* next = (b->next && b->next->state == BlockState::free) ? b->next : nullptr;
  if (prev && next) {
    free_.remove(next);
    std::size_t merged = prev->size + b->size + next->size;
    unlink(b);
    unlink(next);
    recycler_.recycle(b);
    recycler_.recycle(next);
    free_.resize(prev, prev->addr, merged);
  } else if (prev) {
    std::size_t merged = prev->size + b->size;
    unlink(b);
    recycler_.recycle(b);
    free_.resize(prev, prev->addr, merged);
  } else if (next) {
    std::size_t merged = next->size + b->size;
    DevicePtr addr = b->addr;
    unlink(b);
    recycler_.recycle(b);
    free_.resize(next, addr, merged);
  } else {
    b->state = BlockState::free;
    free_.insert(b);
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
      physical_.free_segment(r.base, r.size, small_);
      released += r.size;
      it = regions_.erase(it);
    } else {
      ++it;
    }
  }
  return released;
}

bool Arena::owns(DevicePtr p) const noexcept {
  for (const auto& r : regions_)
    if (p >= r->base && p < r->base + r->size) return true;
  return false;
}

void Arena::append_block(Region& r, Block* b) {
  b->prev = r.last;
  b->next = nullptr;
  if (r.last) r.last->next = b;
  else r.first = b;
  r.last = b;
}

void Arena::insert_after(Block* pos, Block* b) {
  b->prev = pos;
  b->next = pos->next;
  if (pos->next) pos->next->prev = b;
  else pos->region->last = b;
  pos->next = b;
}

void Arena::unlink(Block* b) {
  if (b->prev) b->prev->next = b->next;
  else b->region->first = b->next;
  if (b->next) b->next->prev = b->prev;
  else b->region->last = b->prev;
}

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
        backed += b->size;
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
