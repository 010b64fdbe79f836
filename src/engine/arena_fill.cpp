// Filling holes beside free part-pages, and knowing when a lent page's old mapping may go. See arena.hpp.
#include <algorithm>
#include <iterator>

#include "engine/arena.hpp"

namespace gpumem::engine {
namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
constexpr std::uint64_t kNeverKnown = ~std::uint64_t(0);
}  // namespace

std::uint64_t Arena::note_lend(bool synchronized) {
  if (synchronized) return lends_done();  // the stream was waited for: nothing queued reads the old addresses
  if (capturing()) return kNeverKnown;
  lends_done();  // retires finished lends, so the queue stays short
  EventHandle event;
  try {
    event = backend_.record_event(stream_);
  } catch (...) {
    return kNeverKnown;  // such old mappings wait for unmap_unused(), which synchronizes
  }
  lend_events_.emplace_back(++lends_, event);
  return lends_;
}

bool Arena::capturing() const noexcept {
  return captures_ && captures_->load(std::memory_order_relaxed) != 0;
}

std::uint64_t Arena::lends_done() {
  while (!lend_events_.empty() && !capturing()) {
    const auto [number, event] = lend_events_.front();
    bool done = false;
    try {
      done = backend_.event_done(event);
    } catch (...) {
    }
    if (!done) break;
    backend_.release_event(event);
    lends_done_ = number;
    lend_events_.pop_front();
  }
  return lends_done_;
}

Arena::HoleFit Arena::hole_fit(std::size_t size) {
  // The hole that takes the fewest new pages for `size`, beside a free block; private pools never remap.
  HoleFit best;
  if (!align_blocks_ || !stitching_) return best;
  const bool whole_pages = size % granularity_ == 0;
  const std::uint64_t done = lends_done();
  for (const auto& rp : regions_) {
    if (rp->plain) continue;
    for (Block* h = rp->first; h; h = h->next) {
      if (h->state != BlockState::hole) continue;
      const Block* before = h->prev && h->prev->state == BlockState::free ? h->prev : nullptr;
      const Block* after = h->next && h->next->state == BlockState::free ? h->next : nullptr;
      const std::size_t front = before ? before->size : 0, back = after ? after->size : 0;
      if (front + back == 0 || front + h->size + back < size) continue;
      // Whole pages must start on a page (take() puts them there): only at a free block that does.
      if (whole_pages && !(before && before->addr % granularity_ == 0 && front + h->size >= size)) continue;
      HoleFit fit{h, true, h->size};
      if (before && front + h->size >= size) fit.bytes = round_up(size - front, granularity_);
      else if (after && back + h->size >= size) fit = {h, false, round_up(size - back, granularity_)};
      if (best.hole && best.bytes <= fit.bytes) continue;
      if (fill_ready(fit, fit.bytes, done)) best = fit;
    }
  }
  return best;
}

bool Arena::fill_ready(const HoleFit& fit, std::size_t bytes, std::uint64_t done) const {
  // Only the old mappings under the part filled (fill_hole replaces only those; a long hole may hold
  // thousands, and every growth would walk them).
  const DevicePtr from = fit.from_front ? fit.hole->addr : fit.hole->end() - bytes, to = from + bytes;
  auto it = mappings_.lower_bound(from);
  if (it != mappings_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > from) --it;
  for (; it != mappings_.end() && it->first < to; ++it)
    if (it->second.lent > done) return false;
  return true;
}

Block* Arena::fill_hole(const HoleFit& fit, std::vector<Piece>& pieces) {
  Block* h = fit.hole;
  std::size_t bytes = 0;
  for (const Piece& p : pieces) bytes += p.bytes;
  const DevicePtr at = fit.from_front ? h->addr : h->end() - bytes;
  // The lent pages' old mappings under the part filled go first (their lends are complete: see
  // hole_fit); a hole holds whole mappings, so one that begins before `at` lies in the hole too.
  auto it = mappings_.lower_bound(at);
  if (it != mappings_.begin() && std::prev(it)->first + std::prev(it)->second.bytes > at) --it;
  while (it != mappings_.end() && it->first < at + bytes) it = unmap_mapping(it);
  map_pieces(at, pieces);  // gives the pieces back when it fails; the hole is unchanged then
  hub_.emit(EventKind::segment_map, at, bytes, 0, stream_);
  // Split the hole around [at, at + bytes); the middle becomes free and merges with its neighbours.
  if (at > h->addr) {
    link_front(h, at - h->addr, BlockState::hole);
    h->size -= at - h->addr;
    h->addr = at;
  }
  if (h->size > bytes) {
    Block* back = recycler_.make();
    back->addr = at + bytes;
    back->size = h->size - bytes;
    back->region = h->region;
    back->state = BlockState::hole;
    insert_after(h, back);
    h->size = bytes;
  }
  mapped_bytes_ += bytes;
  h->state = BlockState::allocated;  // release() takes allocated blocks
  return release(h);
}

}  // namespace gpumem::engine
