#include "engine/physical_memory.hpp"

#include <algorithm>

namespace gpumem::engine {

PhysicalMemory::~PhysicalMemory() {
  for (const Chunk& c : chunks_)
    if (c.live) backend_.release_chunk(c.handle);
}

std::size_t PhysicalMemory::take_pieces(std::size_t bytes, std::vector<Piece>& out) {
  std::size_t taken = 0;
  while (taken < bytes && !free_pieces_.empty()) {
    auto largest = std::max_element(free_pieces_.begin(), free_pieces_.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
    auto [chunk, offset] = largest->first;
    std::size_t size = largest->second, page = chunks_[chunk].page;
    std::size_t use = std::min(size, (bytes - taken + page - 1) / page * page);
    free_pieces_.erase(largest);
    if (use < size) free_pieces_.emplace(std::make_pair(chunk, offset + use), size - use);
    out.push_back(Piece{chunk, offset, use});
    chunks_[chunk].free_bytes -= use;
    free_piece_bytes_ -= use;
    taken += use;
  }
  return taken;
}

void PhysicalMemory::give_piece(const Piece& piece) {
  const std::size_t page = chunks_[piece.chunk].page;
  if ((piece.offset | piece.bytes) % page) {
    const std::size_t start = piece.offset / page * page;
    auto [it, added] = part_pages_.try_emplace({piece.chunk, start}, 0);
    it->second += piece.bytes;
    part_page_bytes_ += piece.bytes;
    if (it->second < page) return;
    part_page_bytes_ -= page;
    part_pages_.erase(it);
    give_piece(Piece{piece.chunk, start, page});
    return;
  }
  std::size_t offset = piece.offset, bytes = piece.bytes;
  auto next = free_pieces_.lower_bound({piece.chunk, piece.offset});
  if (next != free_pieces_.begin()) {
    auto prev = std::prev(next);
    if (prev->first.first == piece.chunk && prev->first.second + prev->second == offset) {
      offset = prev->first.second;
      bytes += prev->second;
      free_pieces_.erase(prev);
    }
  }
  if (next != free_pieces_.end() && next->first.first == piece.chunk &&
      piece.offset + piece.bytes == next->first.second) {
    bytes += next->second;
    free_pieces_.erase(next);
  }
  free_pieces_.emplace(std::make_pair(piece.chunk, offset), bytes);
  chunks_[piece.chunk].free_bytes += piece.bytes;
  free_piece_bytes_ += piece.bytes;
}

void PhysicalMemory::count_reserved(std::size_t bytes, bool small_pool, bool added) {
  for (int kind : {int(kAggregatePool), small_pool ? int(kSmallPool) : int(kLargePool)}) {
    if (added) reserved_bytes_[kind].increase(std::int64_t(bytes));
    else reserved_bytes_[kind].decrease(std::int64_t(bytes));
  }
  if (added) reserved_.fetch_add(bytes, std::memory_order_relaxed);
  else reserved_.fetch_sub(bytes, std::memory_order_relaxed);
}

void PhysicalMemory::count_segment(std::size_t bytes, bool small_pool, bool added) {
  for (int kind : {int(kAggregatePool), small_pool ? int(kSmallPool) : int(kLargePool)}) {
    if (added) segment_[kind].increase(1);
    else segment_[kind].decrease(1);
  }
  count_reserved(bytes, small_pool, added);
  if (added) ++device_allocs_;
  else ++device_frees_;
}

Piece PhysicalMemory::create_chunk(std::size_t bytes, bool small_pool, std::size_t page, DevicePtr at) {
  if (would_exceed_limit(bytes))
    throw OutOfMemoryError(limit_crossed());
  ChunkHandle handle = at ? backend_.create_paged_chunk_at(bytes, page, at) : backend_.create_paged_chunk(bytes, page);
  std::size_t index;
  if (!dead_chunk_slots_.empty()) {
    index = dead_chunk_slots_.back();
    dead_chunk_slots_.pop_back();
  } else {
    index = chunks_.size();
    chunks_.emplace_back();
  }
  chunks_[index] = Chunk{handle, bytes, 0, 0, 0, page, small_pool, true};
  count_segment(bytes, small_pool, true);
  return Piece{index, 0, bytes};
}

std::size_t PhysicalMemory::release_unused_chunks() {
  std::size_t released = 0;
  // Pages of chunks still mapped elsewhere, where the backend can free part of a chunk.
  for (auto it = free_pieces_.begin(); it != free_pieces_.end();) {
    auto [index, offset] = it->first;
    Chunk& c = chunks_[index];
    const std::size_t bytes = it->second;
    if (c.free_bytes + c.released == c.bytes && !c.mappings) {  // all of it: released whole below
      ++it;
      continue;
    }
    if (!backend_.release_chunk_part(c.handle, offset, bytes)) {
      ++it;
      continue;
    }
    c.free_bytes -= bytes;
    c.released += bytes;
    free_piece_bytes_ -= bytes;
    count_reserved(bytes, c.small_pool, false);
    released += bytes;
    it = free_pieces_.erase(it);
  }
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    Chunk& c = chunks_[i];
    if (!c.live || c.free_bytes + c.released != c.bytes || c.mappings) continue;
    for (auto it = free_pieces_.lower_bound({i, 0}); it != free_pieces_.end() && it->first.first == i;)
      it = free_pieces_.erase(it);
    free_piece_bytes_ -= c.free_bytes;
    backend_.release_chunk(c.handle);
    count_reserved(c.free_bytes, c.small_pool, false);
    count_segment(0, c.small_pool, false);
    released += c.free_bytes;
    c = Chunk{};
    dead_chunk_slots_.push_back(i);
  }
  return released;
}

void PhysicalMemory::map(DevicePtr va, const Piece& piece) {
  backend_.map(va, piece.bytes, chunks_[piece.chunk].handle, piece.offset);
  ++chunks_[piece.chunk].mappings;
}

void PhysicalMemory::map_run(DevicePtr va, const std::vector<Piece>& pieces) {
  std::vector<Backend::MapCall> calls;
  calls.reserve(pieces.size());
  for (const Piece& p : pieces) calls.push_back({p.bytes, chunks_[p.chunk].handle, p.offset});
  backend_.map_run(va, calls);
  for (const Piece& p : pieces) ++chunks_[p.chunk].mappings;
}

void PhysicalMemory::unmap(DevicePtr va, const Piece& piece) noexcept {
  backend_.unmap(va, piece.bytes);
  --chunks_[piece.chunk].mappings;
}

DevicePtr PhysicalMemory::allocate_segment(std::size_t bytes, bool small_pool) {
  if (would_exceed_limit(bytes))
    throw OutOfMemoryError(limit_crossed());
  DevicePtr p = backend_.allocate(bytes);
  count_segment(bytes, small_pool, true);
  return p;
}

void PhysicalMemory::free_segment(DevicePtr ptr, std::size_t bytes, bool small_pool) noexcept {
  backend_.free(ptr);
  count_segment(bytes, small_pool, false);
}

void PhysicalMemory::reset_peaks() {
  for (auto* stats : {&segment_, &reserved_bytes_})
    for (Stat& s : *stats) s.reset_peak();
}

void PhysicalMemory::reset_accumulated() {
  for (auto* stats : {&segment_, &reserved_bytes_})
    for (Stat& s : *stats) s.reset_accumulated();
}

void PhysicalMemory::check_invariants() const {
  std::size_t total = 0, live_bytes = 0;
  std::vector<std::size_t> per_chunk(chunks_.size());
  std::pair<std::size_t, std::size_t> last_end{SIZE_MAX, 0};
  for (const auto& [key, bytes] : free_pieces_) {
    auto [chunk, offset] = key;
    if (chunk >= chunks_.size() || !chunks_[chunk].live) throw Error("free piece of a dead chunk");
    if (offset + bytes > chunks_[chunk].bytes) throw Error("free piece beyond its chunk");
    if ((offset | bytes) % chunks_[chunk].page) throw Error("free piece splits a page of its chunk");
    if (last_end.first == chunk && last_end.second > offset) throw Error("overlapping free pieces");
    if (last_end.first == chunk && last_end.second == offset) throw Error("unmerged free pieces");
    last_end = {chunk, offset + bytes};
    per_chunk[chunk] += bytes;
    total += bytes;
  }
  if (total != free_piece_bytes_) throw Error("free piece bytes out of sync");
  std::size_t parts = 0;
  for (const auto& [key, bytes] : part_pages_) {
    auto [chunk, offset] = key;
    parts += bytes;
    if (chunk >= chunks_.size() || !chunks_[chunk].live) throw Error("part of a page of a dead chunk");
    if (offset % chunks_[chunk].page || bytes >= chunks_[chunk].page) throw Error("part of a page out of shape");
  }
  if (parts != part_page_bytes_) throw Error("part-page bytes out of sync");
  for (std::size_t i = 0; i < chunks_.size(); ++i) {
    if (!chunks_[i].live) continue;
    if (per_chunk[i] != chunks_[i].free_bytes) throw Error("chunk free bytes out of sync");
    if (chunks_[i].free_bytes + chunks_[i].released > chunks_[i].bytes) throw Error("chunk bytes out of sync");
    live_bytes += chunks_[i].bytes;
  }
  (void)live_bytes;
}

}  // namespace gpumem::engine
