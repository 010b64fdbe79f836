// Where growth's physical pages come from and how they are mapped: pages mapped nowhere, stitching when
// memory is tight, new chunks (large pages or granules), pages made ahead of need, one map run per growth.
// See arena.hpp.
#include <algorithm>

#include "engine/arena.hpp"

namespace gpumem::engine {
namespace {
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
constexpr std::size_t kLargePageRequest = 8;  // see create_paged()
constexpr std::size_t kLargePageShare = 128;  // see create_paged()
constexpr std::size_t kAheadShare = 128;      // see map_ahead()
}  // namespace

void Arena::map_ahead(const Region& r, std::size_t made) {
  // As much as this growth made (growths come in runs of like size while a program ramps up), at most
  // 1/128 of what is reserved: the pages left over when the ramp ends are device memory the reserved
  // count does not show until used, so they may raise the device's peak by that much (at 1/8 a GPT-2
  // generate held 12% more than its reserved peak). So not under a limit (it promises the device memory
  // taken stays below it), nor for private pools (graph captures).
  // Where growths at the top mostly map other pages (stitched ones) over those made ahead instead of
  // using them, none are asked (each such page costs an unmap on the allocating thread).
  const std::size_t q = round_up(std::max(granularity_, std::min(made, physical_.reserved() / kAheadShare)), granularity_);
  if (!align_blocks_ || !stitching_ || capturing() || physical_.limit()) return;
  if (r.top + q + 2 * backend_.large_page() > r.size || ahead_wasted_ > ahead_used_ + q) return;
  physical_.map_ahead(r.base + r.top, q);
  ahead_run_ = q;
}

void Arena::return_pieces(const std::vector<Piece>& pieces) noexcept {
  // Pages lent by this stream's free blocks may still be read by work queued on it: another stream may
  // take them from the shared pool only once that work is done (a failed growth gave them to another
  // stream at once). A failed wait means a broken device, where nothing queued runs any more.
  if (lent_unwaited_ && !pieces.empty()) {
    try {
      backend_.synchronize_stream(stream_);
    } catch (...) {
    }
    lent_unwaited_ = false;
  }
  for (const Piece& p : pieces) physical_.give_piece(p);
}

void Arena::gather(std::size_t need, std::size_t room, Keep keep, std::vector<Piece>& pieces, DevicePtr at) {
  const std::size_t had = pieces.size();
  std::size_t got = physical_.take_pieces(need, pieces);
  // Stitch when memory is tight: most of what is reserved is in use, or the limit is near. With much
  // mapped memory free, the miss is fragmentation that growing cures for good, while stitching would
  // cost map calls on every such miss (a random workload never settles).
  std::size_t free_mapped = free_.bytes() + (sibling_ ? sibling_->free_bytes() : 0);
  bool tight = double(free_mapped) <= config_.stitch_free_fraction * double(physical_.reserved()) ||
               physical_.would_exceed_limit(need - got);
  auto stitch = [&] {
    if (!stitching_) return;
    // This stream's own free pages are reused without a wait (its work is ordered); should the growth
    // fail they go to the shared pool, and only after a wait for this stream (return_pieces). No wait
    // is allowed during a graph capture: then none are taken.
    if (!capturing()) {
      const std::size_t before = got;
      if (got < need) got += lend(need - got, keep, pieces);
      if (got < need && sibling_) got += sibling_->lend(need - got, Keep{}, pieces);
      lent_unwaited_ |= got > before;
    }
    if (got < need) got += physical_.lend_foreign(need - got, this, pieces);  // those waited for their streams
  };
  if (tight) stitch();
  if (got >= need) return;
  auto give_back = [&] {
    return_pieces(std::vector<Piece>(pieces.begin() + std::ptrdiff_t(had), pieces.end()));
    pieces.resize(had);
  };
  try {
    create_for(need - got, room - std::min(room, got), pieces, at);
  } catch (const OutOfMemoryError&) {
    if (!tight) stitch();  // the device is full: stitching is all that is left
    if (got < need) {
      give_back();
      throw;
    }
  } catch (...) {
    give_back();
    throw;
  }
}

void Arena::create_for(std::size_t want, std::size_t room, std::vector<Piece>& out, DevicePtr at) {
  // More than the whole device beside what is held here cannot be made: refused before any page is (made
  // one by one until the driver refused, a 32 TiB request took half an H100 and gave it back).
  if (want > device_total() - std::min(device_total(), physical_.reserved()))
    throw OutOfMemoryError("the device has " + format_bytes(device_total()) + " in all, " +
                           format_bytes(physical_.reserved()) + " of it reserved here; " + format_bytes(want) +
                           " more cannot fit");
  std::size_t chunk = std::max(want, std::min(chunk_quantum(), room));
  if (physical_.would_exceed_limit(chunk)) chunk = want;
  try {
    create_paged(chunk, want, out, at);
  } catch (const OutOfMemoryError&) {
    if (chunk == want) throw;
    create_paged(want, want, out, at);
  }
}

void Arena::create_paged(std::size_t bytes, std::size_t want, std::vector<Piece>& out, DevicePtr at) {
  // Every physical page costs the same driver time whatever its size (BENCHMARKS.md), but memory splits,
  // is lent and is given back only in whole pages. So large pages only for growth asked by a request of
  // at least kLargePageRequest of them (a large page left partly used then wastes at most an eighth of
  // such a request), the bulk in large pages and the rest in granules; the small pool keeps granules.
  // And only for what lies past the first kLargePageShare of them reserved: smaller blocks later reuse a
  // freed request's pages, and a large page they leave partly used at the peak then costs under 1% of it
  // (a 0.8 GB serving workload with 402 MB attention scores held 1.03x its peak live bytes in 16 MiB
  // pages). A growth that crosses the mark takes large pages for its part past it: one first request of
  // 48 GiB in granules is ~1 s of driver calls to map, and again to give back.
  // And only below half the ceiling (the limit, else the device's memory): above it memory is what may run
  // short, and large pages left partly used would strand what a request at the ceiling needs (a
  // checkpointed LM: 46 of them held 297 MiB free at 11 GB live; the smallest device it ran on was 1.028x
  // its peak live bytes, 1.014x with this rule). Each granule costs as much driver time as a large page.
  // On a device other processes share, the ceiling is at most what this allocator holds plus what is free
  // (LoRA fine-tuning beside a process holding all but 5 GiB of an H100 ran out of memory 22 MiB short,
  // with 16 MiB pages made as if the whole device were there).
  const std::size_t large = small_ ? granularity_ : backend_.large_page();
  std::size_t ceiling = physical_.limit() ? physical_.limit() : device_total();
  if (large > granularity_ && want >= kLargePageRequest * large) {
    try {
      ceiling = std::min(ceiling, physical_.reserved() + backend_.mem_info().free);
    } catch (...) {  // unknown: the device's memory, as before
    }
  }
  const std::size_t from = std::max(physical_.reserved(), kLargePageShare * large);
  const std::size_t to = std::min(physical_.reserved() + bytes, ceiling / 2);
  const std::size_t in_large = to > from ? to - from : 0;
  const std::size_t bulk = want >= kLargePageRequest * large ? in_large / large * large : 0;
  if (bulk == 0 || bulk == bytes) {
    out.push_back(physical_.create_chunk(bytes, small_, bulk ? large : granularity_, bulk ? 0 : at));
    if (at && !bulk) {
      made_at_ = out.back().chunk;
      made_at_bytes_ = bytes;
    }
    return;
  }
  Piece pages = physical_.create_chunk(bulk, small_, large);
  try {
    out.push_back(physical_.create_chunk(bytes - bulk, small_, granularity_));
  } catch (...) {
    physical_.give_piece(pages);  // cached, not lost: a later growth takes it, empty_cache() returns it
    throw;
  }
  out.push_back(pages);
}

std::size_t Arena::map_pieces(DevicePtr at, std::vector<Piece>& pieces, const Piece* first, const Piece* last,
                              std::size_t front_chunk) {
  // One mapping per page (or per map_unit_bytes), so that empty_cache() can give back any page that
  // holds no live byte; one map_run for all of them, so access is granted once (the costly driver call).
  // The order of pieces under the new addresses does not matter: sorted, neighbours in a chunk merge.
  std::sort(pieces.begin(), pieces.end(), [front_chunk](const Piece& a, const Piece& b) {
    if ((a.chunk == front_chunk) != (b.chunk == front_chunk)) return a.chunk == front_chunk;
    return a.chunk != b.chunk ? a.chunk < b.chunk : a.offset < b.offset;
  });
  std::vector<Piece> runs;
  for (const Piece& p : pieces) {
    if (!runs.empty() && runs.back().chunk == p.chunk && runs.back().offset + runs.back().bytes == p.offset)
      runs.back().bytes += p.bytes;
    else
      runs.push_back(p);
  }
  std::vector<Piece> units;
  if (first) units.push_back(*first);
  for (const Piece& p : runs) {
    const std::size_t page = physical_.page_of(p.chunk);
    const std::size_t unit = config_.map_unit_bytes ? round_up(config_.map_unit_bytes, page) : page;
    for (std::size_t off = 0; off < p.bytes; off += unit)
      units.push_back(Piece{p.chunk, p.offset + off, std::min(unit, p.bytes - off)});
  }
  if (last) units.push_back(*last);
  try {
    physical_.map_run(at, units);  // all or nothing
  } catch (...) {
    return_pieces(runs);
    throw;
  }
  std::size_t mapped = 0;
  const auto before = mappings_.lower_bound(at);  // every new mapping goes just before it, in order
  for (const Piece& u : units) {
    mappings_.emplace_hint(before, at + mapped, Mapping{u.bytes, u});
    mapped += u.bytes;
  }
  return mapped;
}

}  // namespace gpumem::engine
