#include "engine/arena.hpp"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>

namespace gpumem::engine {
namespace {
constexpr std::size_t kMinBlock = 512;
constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kMaxQuantum = 64 * kMiB;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

Arena::Arena(Backend& backend, PhysicalMemory& physical, BlockRecycler& recycler, const AllocatorConfig& config,
             StreamId stream, bool small_pool, const EventHub& hub)
    : backend_(backend), physical_(physical), recycler_(recycler), config_(config), stream_(stream),
      small_(small_pool), hub_(hub), granularity_(backend.granularity()),
      align_blocks_(!small_pool && !config.force_plain && backend.supports_virtual_memory()) {}

Arena::~Arena() {
  std::lock_guard lock(physical_.mutex());
  for (auto& [va, m] : mappings_) physical_.unmap(va, m.piece);  // chunks are released by PhysicalMemory
  for (auto& [number, event] : lend_events_) backend_.release_event(event);
  for (auto& r : regions_) {
    for (Block* b = r->first; b; b = b->next) {
      delete b->other_streams;
      b->other_streams = nullptr;
    }
    if (r->plain) physical_.free_segment(r->base, r->size, small_);
    else backend_.release_range(r->base, r->size);
  }
}

std::size_t Arena::device_total() {
  if (!device_total_) device_total_ = backend_.mem_info().total;
  return device_total_;
}

std::size_t Arena::chunk_quantum() const {
  if (config_.min_chunk_bytes) return round_up(config_.min_chunk_bytes, granularity_);
  // Grow in steps of 1/256 of what is reserved: few device calls while memory ramps up, and never
  // more than 0.4% taken beyond the need when the program reaches its peak.
  if (small_ || exact_growth_) return granularity_;  // small blocks are few bytes; see grow_virtual
  std::size_t q = std::clamp(physical_.reserved() / 256, granularity_, kMaxQuantum);
  return round_up(q, granularity_);
}

DevicePtr Arena::page_start(DevicePtr addr, std::size_t size) const noexcept {
  const DevicePtr at = round_up(addr, granularity_);
  return at - addr > size / 2 ? addr : at;
}

DevicePtr Arena::start_in(const Block* b, std::size_t size) const noexcept {
  if (size % granularity_ || b->addr % granularity_ == 0) return b->addr;
  if (b->end() % granularity_ == 0 && b->end() != b->region->base + b->region->top)
    return b->end() - size;  // the free rest stays one range, in front
  const DevicePtr at = page_start(b->addr, size);
  return at + size <= b->end() ? at : 0;
}

bool Arena::packing() const noexcept {
  if (!align_blocks_ || !stitching_) return false;  // only a large arena that may remap
  const std::size_t ceiling = physical_.limit() ? physical_.limit() : device_total_;
  return ceiling && physical_.reserved() >= ceiling / 10 * 9;
}

std::size_t Arena::stranded(DevicePtr start, DevicePtr end) const noexcept {
  if (end <= start) return 0;
  const DevicePtr first = round_up(start, granularity_), last = end / granularity_ * granularity_;
  return last > first ? (end - start) - (last - first) : end - start;
}

Block* Arena::find_packed(Block* fit, std::size_t size) const noexcept {
  const auto added = [&](const Block* b) {
    return std::int64_t(stranded(b->addr + size, b->end())) - std::int64_t(stranded(b->addr, b->end()));
  };
  // A few stranded bytes beside a large block cost less than remapping it (an RLHF loop's 911 MiB logits).
  const std::int64_t tolerated = std::int64_t(size / 64);
  std::int64_t best = added(fit) - tolerated;
  if (best <= 0) return fit;
  constexpr int kLooks = 16;
  const std::size_t roomy = 2 * size + 2 * granularity_;
  int looks = 0;
  free_.for_each_fit(size, [&](Block* b) {
    if (b->size > roomy || ++looks > kLooks) return true;
    if (added(b) <= tolerated) fit = b, best = 0;
    return best <= 0;
  });
  return best <= 0 ? fit : nullptr;
}

Block* Arena::find_aligned(Block* fit, std::size_t size) const noexcept {
  if (start_in(fit, size)) return fit;
  // Any block this large holds it where start_in puts it (addresses are multiples of kMinBlock).
  Block* roomy = free_.find(size + granularity_ - kMinBlock);
  return roomy ? roomy : fit;
}

Block* Arena::grow(std::size_t size) {
  bool plain = config_.force_plain || !backend_.supports_virtual_memory();
  if (plain) return grow_plain(size);
  const Region* last = regions_.empty() ? nullptr : regions_.back().get();
  const std::size_t top_before = last ? last->top : 0;
  made_at_ = kNoChunk;
  made_at_bytes_ = 0;
  const std::size_t run = std::exchange(ahead_run_, 0);  // asked ahead before this growth
  Block* b = grow_virtual(size);
  // A new region may have given the last one's range back (release_drained_regions).
  if (std::none_of(regions_.begin(), regions_.end(), [&](const auto& r) { return r.get() == last; })) last = nullptr;
  if (last && last->top > top_before && run) {
    // What of the pages asked ahead at the old top this growth used (new pages made there) and what it
    // mapped other pages over (the backend unmaps those unused): see map_ahead.
    const std::size_t over = std::min(run, last->top - top_before), used = std::min(over, made_at_bytes_);
    ahead_used_ += used;
    ahead_wasted_ += over - used;
    if (!ahead_run_) ahead_run_ = run - over;  // the rest still waits (unless this growth asked anew)
  } else if (!ahead_run_) {
    ahead_run_ = run;
  }
  if (exact_growth_ && align_blocks_ && stitching_) {
    // Fragmentation, not a new high: the program has stopped growing (for now), so pages made ahead
    // for its growth go back rather than sit unseen (see map_ahead).
    std::lock_guard lock(physical_.mutex());
    physical_.map_ahead(0, 0);
    ahead_run_ = 0;
  }
  return b;
}

void Arena::release_drained_regions() {
  std::lock_guard lock(physical_.mutex());
  for (auto it = regions_.begin(); it != regions_.end();) {
    Region& r = **it;
    bool drained = !r.plain;
    for (const Block* b = r.first; drained && b; b = b->next) drained = b->state == BlockState::hole;
    auto m = mappings_.lower_bound(r.base);
    if (!drained || (m != mappings_.end() && m->first < r.base + r.size)) {
      ++it;
      continue;
    }
    physical_.map_ahead(0, 0);  // no page made ahead may wait in a range given back
    ahead_run_ = 0;
    for (Block* b = r.first; b;) {
      Block* next = b->next;
      recycler_.recycle(b);
      b = next;
    }
    backend_.release_range(r.base, r.size);
    it = regions_.erase(it);
  }
}

Region& Arena::new_region(std::size_t min_bytes) {
  if (!regions_.empty()) release_drained_regions();
  std::size_t va = config_.pool_va_bytes;
  if (!va) {
    std::size_t total = device_total();
    va = small_ ? std::max(total / 8, std::size_t(1) << 30) : total;
  }
  va = round_up(std::max(va, min_bytes), granularity_);
  auto r = std::make_unique<Region>();
  {
    std::lock_guard lock(physical_.mutex());  // backend memory calls run one at a time (backend.hpp)
    r->base = backend_.reserve(va);
  }
  r->size = va;
  r->small = small_;
  regions_.push_back(std::move(r));
  return *regions_.back();
}

Block* Arena::free_tail(const Region& r) const noexcept {
  Block* last = r.last;
  return last && last->state == BlockState::free && last->end() == r.base + r.top ? last : nullptr;
}

std::size_t Arena::top_need(const Region& r, const Block* tail, std::size_t size) const noexcept {
  // The new block starts in the free tail, aligned (take() puts it there), or at the top.
  if (!tail) return round_up(size, granularity_);
  const bool whole_pages = align_blocks_ && size % granularity_ == 0;
  const DevicePtr start = whole_pages ? page_start(tail->addr, size) : tail->addr;  // as start_in puts it
  return round_up(start + size - std::min(start + size, r.base + r.top), granularity_);
}

Block* Arena::grow_virtual(std::size_t size) {
  Region* r = regions_.empty() ? nullptr : regions_.back().get();
  // Taking free pieces and lending may bring up to a large page more than the need (whole pages), and
  // lending may take the free tail's pages.
  if (!r || r->top + round_up(size, granularity_) + 2 * backend_.large_page() > r->size)
    r = &new_region(round_up(size, granularity_));
  // Bytes in use here plus the request: at or below an earlier growth's, this growth is fragmentation
  // (the memory sufficed before), so it takes only what is missing, not a growth quantum.
  const std::size_t demand = mapped_bytes_ - free_.bytes() + size;
  exact_growth_ = demand <= demand_high_;
  demand_high_ = std::max(demand_high_, demand);
  const bool packed = packs(size);
  const HoleFit fit = packed ? HoleFit{} : hole_fit(size);  // see packing()
  std::lock_guard lock(physical_.mutex());
  unmap_done_lends();
  lent_unwaited_ = false;
  std::vector<Piece> pieces;
  Block* tail = free_tail(*r);
  std::size_t need = top_need(*r, tail, size);
  const SharePlan share = share_plan(tail, size, need);
  if (share) need = share.pages;
  // Filling a hole keeps the free blocks beside it (they become part of the block) out of stitching, so its
  // pages come from the rest; growing at the top may lend those blocks too. When the rest cannot cover the
  // hole but all that is free could cover the top, the hole would take new memory and the top none.
  const auto hole_takes_new_memory = [&] {
    std::size_t beside = 0;
    for (const Block* b : {fit.hole->prev, fit.hole->next})
      if (b && b->state == BlockState::free) beside += b->size;
    const std::size_t free = free_.bytes() + (sibling_ ? sibling_->free_bytes() : 0) + physical_.free_piece_bytes();
    return free - std::min(free, beside) < fit.bytes && free >= need;
  };
  if (fit.hole && (fit.bytes < need || (share && fit.bytes == need)) && !hole_takes_new_memory()) {  // tie: no share
    gather(fit.bytes, fit.hole->size, Keep{{fit.hole->prev, fit.hole->next}}, pieces);
    std::size_t got = 0;
    for (const Piece& p : pieces) got += p.bytes;
    // More whole pages than asked may come (a large page), over old mappings not yet known free.
    if (got <= fit.hole->size && (got == fit.bytes || fill_ready(fit, got, lends_done_))) return fill_hole(fit, pieces);
    // More whole pages came than the hole holds (or may take now): they go to the top (whose tail they
    // may include).
    tail = free_tail(*r);
    need = top_need(*r, tail, size);
    if (got < need) {
      try {
        gather(need - got, r->size - r->top - got, Keep{{tail}}, pieces);
      } catch (...) {
        return_pieces(pieces);
        throw;
      }
    }
  } else {
    const std::int64_t chunks_before = physical_.device_allocs();
    const std::size_t reserved_before = physical_.reserved();
    gather(need, r->size - r->top, Keep{{tail, share.head, share.tail}}, pieces, share ? 0 : r->base + r->top);
    if (share) return map_shared_at_top(*r, tail, share, pieces);
    Block* grown = map_at_top(*r, tail, pieces, made_at_);
    const bool fresh = physical_.device_allocs() != chunks_before;
    fresh_growths_ = fresh ? fresh_growths_ + 1 : 0;
    if (fresh && fresh_growths_ >= 2 && !exact_growth_) map_ahead(*r, physical_.reserved() - reserved_before);
    return grown;
  }
  return map_at_top(*r, tail, pieces);
}

Block* Arena::map_at_top(Region& r, Block* tail, std::vector<Piece>& pieces, std::size_t front_chunk) {
  const DevicePtr at = r.base + r.top;
  const std::size_t mapped = map_pieces(at, pieces, nullptr, nullptr, front_chunk);
  hub_.emit(EventKind::segment_map, at, mapped, 0, stream_);
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
  return append_new(r, at, bytes, BlockState::free);
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
  hub_.emit(EventKind::segment_alloc, base, segment, 0, stream_);
  auto r = std::make_unique<Region>();
  r->base = base;
  r->size = r->top = segment;
  r->plain = true;
  r->small = small_;
  regions_.push_back(std::move(r));
  return append_new(*regions_.back(), base, segment, BlockState::free);
}

Block* Arena::take(Block* b, std::size_t size) {
  if (align_blocks_) {
    const DevicePtr at = start_in(b, size);
    if (at && at != b->addr) b = split_free(b, at);
  }
  return take_front(b, size);
}

Block* Arena::split_free(Block* b, DevicePtr at) {
  free_.insert(insert_front(b, at - b->addr, BlockState::free));
  return b;
}

Block* Arena::insert_front(Block* b, std::size_t bytes, BlockState state) {
  Block* front = link_front(b, bytes, state);
  free_.resize(b, b->addr + bytes, b->size - bytes);
  return front;
}

Block* Arena::link_front(Block* b, std::size_t bytes, BlockState state) {
  Block* front = recycler_.make();
  front->addr = b->addr;
  front->size = bytes;
  front->region = b->region;
  front->state = state;
  front->prev = b->prev;
  front->next = b;
  if (b->prev) b->prev->next = front;
  else b->region->first = front;
  b->prev = front;
  return front;
}

Block* Arena::take_front(Block* b, std::size_t size) {
  if (b->size - size < kMinBlock) {
    free_.remove(b);
    b->state = BlockState::allocated;
    return b;
  }
  // The free block keeps the rest (often without leaving its size class); a new record takes the front.
  return insert_front(b, size, BlockState::allocated);
}

Block* Arena::take_at(DevicePtr addr, std::size_t size) {
  Region* r = region_of(addr);
  Block* b = r ? block_containing(*r, addr) : nullptr;
  if (!b || b->state != BlockState::free || addr + size > b->end()) return nullptr;
  if (b->addr < addr) b = split_free(b, addr);  // the part before addr stays free as a block of its own
  return take_front(b, size);
}

std::string Arena::describe_at(DevicePtr addr) const {
  Region* r = region_of(addr);
  Block* b = r ? block_containing(*r, addr) : nullptr;
  if (!b) return r ? "unmapped memory above the top of a region" : "";
  static constexpr const char* kState[] = {"a free block", "a live block",
                                           "a pending block (freed, still in use by a stream)", "a parked block",
                                           "a hole (memory given back)", "a shared block"};
  static_assert(std::size(kState) == std::size_t(BlockState::shared) + 1, "one name per BlockState");
  return std::string(kState[std::size_t(b->state)]) + " of " + format_bytes(b->size) + " at " +
         std::to_string(b->addr) + (small_ ? " (small pool)" : " (large pool)");
}

Block* Arena::release(Block* b) noexcept {
  freed_sizes_[freed_slot(b->size)] = b->size;
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
    return prev;
  } else if (prev) {
    std::size_t merged = prev->size + b->size;
    unlink(b);
    recycler_.recycle(b);
    free_.resize(prev, prev->addr, merged);
    return prev;
  } else if (next) {
    std::size_t merged = next->size + b->size;
    DevicePtr addr = b->addr;
    unlink(b);
    recycler_.recycle(b);
    free_.resize(next, addr, merged);
    return next;
  }
  b->state = BlockState::free;
  free_.insert(b);
  return b;
}

bool Arena::owns(DevicePtr p) const noexcept {
  for (const auto& r : regions_)
    if (p >= r->base && p < r->base + r->size) return true;
  return false;
}

Block* Arena::append_new(Region& r, DevicePtr at, std::size_t bytes, BlockState state) {
  Block* b = recycler_.make();
  b->addr = at;
  b->size = bytes;
  b->region = &r;
  b->state = state;
  append_block(r, b);
  if (state == BlockState::free) free_.insert(b);
  return b;
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

}  // namespace gpumem::engine
