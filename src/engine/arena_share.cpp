// Sharing a page between two addresses: a growth at the top takes along the free part-pages beside
// live blocks. See arena.hpp (SharePlan).
#include <algorithm>
#include <iterator>

#include "engine/arena.hpp"

namespace gpumem::engine {
namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

struct Part {
  Block* block;
  std::size_t bytes;
  Block* owner = nullptr;   // part_page_source's: the page's bytes are used at another address
  DevicePtr owner_page = 0;
};
}  // namespace

const Arena::Mapping* Arena::page_mapping(DevicePtr p, DevicePtr* start) const {
  auto it = mappings_.upper_bound(p);
  if (it == mappings_.begin()) return nullptr;
  --it;
  const Mapping& m = it->second;
  if (p >= it->first + m.bytes) return nullptr;
  // Without map_unit_bytes (share_plan's condition) every mapping is one physical page, so its parts go
  // back to PhysicalMemory page by page. (PhysicalMemory is not asked: settle_shared runs without its lock.)
  if (config_.map_unit_bytes || m.bytes != m.piece.bytes) return nullptr;
  *start = it->first;
  return &m;
}

bool Arena::part_page_source(const Block* b, DevicePtr start, DevicePtr end, Block** owner_block,
                             DevicePtr* owner_page) const {
  *owner_block = nullptr;
  const Block* other = nullptr;
  int others = 0;
  bool elsewhere = false;
  for (const Block* x = b->prev; x && x->addr >= start; x = x->prev, ++others) {
    elsewhere |= x->state == BlockState::shared || x->state == BlockState::hole;
    other = x;
  }
  for (const Block* x = b->next; x && x->addr < end; x = x->next, ++others) {
    elsewhere |= x->state == BlockState::shared || x->state == BlockState::hole;
    other = x;
  }
  if (!elsewhere) return true;
  // The rest of the page is used at another address (this page was shared before). Its bytes can follow
  // b's to the new address only if that address learns where they are, and their owner where b's go:
  // else each side would wait for a partner that moved on, and the page, once free at both, could be
  // neither lent nor given back (a threaded server: 138 MB of such pages at its peak).
  if (others != 1 || other->state != BlockState::shared) return false;
  auto here = mappings_.find(start);
  if (here == mappings_.end()) return false;
  Block* back = shared_partner(start, here->second, other->requested, b->addr - start, b->size);
  if (!back) return false;
  *owner_block = back;
  *owner_page = other->requested;
  return true;
}

Block* Arena::shared_partner(DevicePtr page, const Mapping& here, DevicePtr q, std::size_t offset,
                             std::size_t bytes) const {
  auto there = mappings_.find(q);
  if (there == mappings_.end() || there->second.piece.chunk != here.piece.chunk ||
      there->second.piece.offset != here.piece.offset || there->second.bytes != here.bytes)
    return nullptr;
  Region* rq = region_of(q);
  Block* other = rq ? block_containing(*rq, q + offset) : nullptr;
  if (!other || other->state != BlockState::shared || other->requested != page || other->addr != q + offset ||
      other->size != bytes)
    return nullptr;
  return other;
}

Arena::SharePlan Arena::share_plan(const Block* top_tail, std::size_t size, std::size_t need) const {
  // A request of whole pages gains nothing (a part-page never saves one of its pages) and must start
  // on a page; private pools never remap; map_unit_bytes makes mappings of several pages.
  if (!config_.share_part_pages || !stitching_ || !align_blocks_ || config_.map_unit_bytes ||
      size % granularity_ == 0)
    return {};
  std::vector<Part> heads, tails;
  // Only free blocks within one page: the whole pages of larger ones stay for lending. The largest
  // first, and a bounded number: a growth costs driver calls, but no walk over every free block.
  constexpr int kLooks = 64, kEach = 8;
  const std::size_t large = std::max(granularity_, backend_.large_page());
  // A plan saves a page only with head + tail >= size + a page - need: the largest candidates come
  // first, so once one cannot reach that beside the largest seen (or one as large), none after it can.
  const std::size_t reach = size + granularity_ - std::min(need, size);
  std::size_t largest = top_tail ? top_tail->size : 0;
  int looks = 0;
  free_.for_each_below(large, [&](Block* b) {
    if (b->size + std::max(largest, b->size) < reach) return true;
    if (b->size >= large || b == top_tail || b->region->plain) return false;
    // Within one page of either size (a cheap test before the mapping is looked up).
    const bool in_granule = b->addr / granularity_ == (b->end() - 1) / granularity_;
    if (!in_granule && b->addr / large != (b->end() - 1) / large) return false;
    DevicePtr start = 0;
    const Mapping* m = page_mapping(b->addr, &start);
    Block* owner = nullptr;
    DevicePtr owner_page = 0;
    if (m && start + m->bytes >= b->end() && part_page_source(b, start, start + m->bytes, &owner, &owner_page)) {
      largest = std::max(largest, b->size);
      if (start != b->addr && start + m->bytes == b->end() && heads.size() < kEach) heads.push_back({b, b->size, owner, owner_page});
      else if (start == b->addr && start + m->bytes != b->end() && tails.size() < kEach) tails.push_back({b, b->size, owner, owner_page});
    }
    return ++looks >= kLooks || (heads.size() >= kEach && tails.size() >= kEach);
  });
  if (heads.empty() && tails.empty()) return {};
  std::sort(tails.begin(), tails.end(), [](const Part& a, const Part& b) { return a.bytes < b.bytes; });
  // The run may begin with the top's free tail (no page shared) or a head; the fewest new pages win,
  // then the fewest shared pages, then the least left over.
  if (top_tail) heads.push_back({nullptr, top_tail->size});
  else heads.push_back({nullptr, 0});
  const auto pages_for = [&](std::size_t h, std::size_t t) { return size > h + t ? round_up(size - h - t, granularity_) : 0; };
  SharePlan best;
  std::size_t best_pages = need, best_shared = 0, best_left = 0;
  const auto consider = [&](const Part& head, const Part* tail) {
    if (tail && tail->block == head.block) return;
    const std::size_t t = tail ? tail->bytes : 0, pages = pages_for(head.bytes, t);
    const std::size_t shared = (head.block ? 1 : 0) + (tail ? 1 : 0), left = head.bytes + t + pages - size;
    if (pages > best_pages || shared == 0) return;
    if (pages == best_pages && (!best || shared > best_shared || (shared == best_shared && left >= best_left))) return;
    best = SharePlan{head.block, tail ? tail->block : nullptr, head.block ? head.bytes : 0, t, pages};
    best.head_owner = head.owner, best.head_owner_page = head.owner_page;
    if (tail) best.tail_owner = tail->owner, best.tail_owner_page = tail->owner_page;
    best_pages = pages, best_shared = shared, best_left = left;
  };
  for (const Part& head : heads) {
    consider(head, nullptr);
    if (tails.empty()) continue;
    // The fewest pages any tail gives with this head, then the smallest tail that gives them.
    const std::size_t pages = pages_for(head.bytes, tails.back().bytes);
    const std::size_t want = size > head.bytes + pages ? size - head.bytes - pages : 0;
    auto it = std::lower_bound(tails.begin(), tails.end(), want, [](const Part& p, std::size_t w) { return p.bytes < w; });
    for (; it != tails.end(); ++it) {
      if (it->block == head.block) continue;
      consider(head, &*it);
      break;
    }
  }
  return best;
}

Block* Arena::map_shared_at_top(Region& r, Block* top_tail, const SharePlan& plan, std::vector<Piece>& pieces) {
  const DevicePtr at = r.base + r.top;
  DevicePtr head_page = 0, tail_page = 0;
  const Mapping* hm = plan.head ? page_mapping(plan.head->addr, &head_page) : nullptr;
  const Mapping* tm = plan.tail ? page_mapping(plan.tail->end() - 1, &tail_page) : nullptr;
  const Piece first = hm ? hm->piece : Piece{}, last = tm ? tm->piece : Piece{};
  const std::size_t front = hm ? hm->bytes - plan.head_bytes : 0;  // bytes the other address uses
  const std::size_t back = tm ? tm->bytes - plan.tail_bytes : 0;
  // Where those bytes are used: the part-page's address, or the one it shares them with (a second share).
  const DevicePtr head_user = plan.head_owner ? plan.head_owner_page : head_page;
  const DevicePtr tail_user = plan.tail_owner ? plan.tail_owner_page : tail_page;
  const std::size_t total = map_pieces(at, pieces, hm ? &first : nullptr, tm ? &last : nullptr);
  const DevicePtr new_tail_page = at + total - (tm ? tm->bytes : 0);
  // The part-pages' old addresses: their bytes are used at the new ones now.
  if (plan.head) {
    hub_.emit(EventKind::stitch, plan.head->addr, plan.head_bytes, 0, stream_);
    carve_hole(plan.head, plan.head->addr, plan.head_bytes, BlockState::shared, at);
    mapped_bytes_ -= plan.head_bytes;
    retire_if_all_shared(plan.head);
  }
  if (plan.tail) {
    hub_.emit(EventKind::stitch, plan.tail->end() - plan.tail_bytes, plan.tail_bytes, 0, stream_);
    Block* t = plan.tail;
    carve_hole(t, t->end() - plan.tail_bytes, plan.tail_bytes, BlockState::shared, new_tail_page);
    mapped_bytes_ -= plan.tail_bytes;
    retire_if_all_shared(t->state == BlockState::shared ? t : t->next);
  }
  hub_.emit(EventKind::segment_map, at, total, 0, stream_);
  Block* block;
  if (plan.head_owner) plan.head_owner->requested = at;
  if (plan.tail_owner) plan.tail_owner->requested = new_tail_page;
  if (plan.head) {
    r.top += front;
    append_new(r, at, front, BlockState::shared)->requested = head_user;
    block = extend_top(r, nullptr, total - front - back);
  } else {
    block = extend_top(r, top_tail, total - back);
  }
  if (back) {
    r.top += back;
    append_new(r, at + total - back, back, BlockState::shared)->requested = tail_user;
  }
  return block;
}

void Arena::settle_shared(Block* f) noexcept {
  if (!align_blocks_) return;  // only a large arena over virtual memory shares pages (share_plan)
  // A page mapped at two addresses: here (page start p) a shared block beside f and the rest of the
  // page all in f; there (page start q) a shared block over exactly the bytes f holds here. Then the
  // bytes move there: its shared block becomes free (merging with its neighbours) and they become
  // shared here. Same stream, so no wait: like reusing a freed block.
  for (Block* s : {f->prev, f->next}) {
    if (!s || s->state != BlockState::shared || f->state != BlockState::free) continue;
    // Cheap tests first. The partner page is below this one exactly when it is below s (mappings do
    // not overlap); and f must reach a page's width from s's page-aligned end.
    if (s->requested < s->addr) continue;
    if (s == f->prev ? s->addr % granularity_ || f->end() < s->addr + granularity_
                     : s->end() % granularity_ || f->addr + granularity_ > s->end())
      continue;
    DevicePtr p = 0;
    const Mapping* here = page_mapping(s->addr, &p);
    if (!here || s->end() > p + here->bytes) continue;
    DevicePtr own = 0, own_end = 0;
    if (s->addr == p) own = s->end(), own_end = p + here->bytes;
    else if (s->end() == p + here->bytes) own = p, own_end = s->addr;
    else continue;
    if (f->addr > own || f->end() < own_end) continue;
    // Only from the older address (the lower: the newer one was the region's top) to the newer (tested
    // above): the bytes a long-lived tensor kept beside a borrowed part-page join the borrower's page,
    // which is whole again once the borrower is freed. The other way the old part-page only comes back.
    const DevicePtr q = s->requested;
    Block* other = shared_partner(p, *here, q, own - p, own_end - own);
    if (!other || !recycler_.ensure_spare()) continue;
    const bool at_start = own == f->addr;
    carve_hole(f, own, own_end - own, BlockState::shared, q);
    mapped_bytes_ -= own_end - own;
    other->state = BlockState::allocated;  // release() takes allocated blocks
    mapped_bytes_ += other->size;
    release(other);
    retire_if_all_shared(at_start ? f : f->next);
    return;
  }
}

void Arena::retire_if_all_shared(Block* b) noexcept {
  DevicePtr p = 0;
  const Mapping* m = page_mapping(b->addr, &p);
  if (!m) return;
  Block* first = b;
  while (first->prev && first->prev->addr >= p) first = first->prev;
  if (first->addr != p) return;  // a block from before the page holds its first bytes
  Block* in_page[8];
  std::size_t n = 0;
  for (Block* x = first; x && x->addr < p + m->bytes; x = x->next) {
    if (x->state != BlockState::shared || n == std::size(in_page)) return;
    in_page[n++] = x;
  }
  // Every byte of this page is used at other addresses: its blocks become a hole (the block list stays
  // short, the addresses can be filled again), and the mapping may go once the work queued so far, which
  // may still read the page here, is done (as for a lent page).
  std::uint64_t lent = ~std::uint64_t(0);  // never known done: it waits for empty_cache()
  try {
    lent = note_lend(false);
  } catch (...) {
  }
  mappings_.find(p)->second.lent = lent;
  for (std::size_t i = 0; i < n; ++i) shared_to_hole(in_page[i]);
}

}  // namespace gpumem::engine
