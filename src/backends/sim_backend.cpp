#include "gpumem/sim_backend.hpp"

#include <algorithm>
#include <string>

namespace gpumem {
namespace {
// Synthetic addresses start high and far apart so a stray use as a real pointer faults at once.
constexpr DevicePtr kSimVaBase = DevicePtr(0x7e00) << 32;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
}  // namespace

SimBackend::SimBackend(SimBackendOptions options)
    : options_(options), next_va_(kSimVaBase), events_(options.manual_events) {
  if (options_.granularity == 0 || (options_.granularity & (options_.granularity - 1)) != 0)
    throw BackendError("sim backend: granularity must be a power of two, got " +
                       std::to_string(options_.granularity));
  if (!options_.large_page) options_.large_page = options_.granularity;
  if (options_.large_page % options_.granularity)
    throw BackendError("sim backend: the large page must be a multiple of the granularity, got " +
                       std::to_string(options_.large_page));
}

DevicePtr SimBackend::reserve(std::size_t bytes) {
  ++counts_.reserves;
  if (bytes == 0 || bytes % options_.granularity) throw BackendError("sim backend: reserve of an unaligned size");
  DevicePtr base = next_va_;
  next_va_ += round_up(bytes, options_.granularity) + options_.granularity;  // guard gap between ranges
  return base;
}

void SimBackend::release_range(DevicePtr base, std::size_t bytes) noexcept {
  drop_ahead(base, bytes);
  ++counts_.range_releases;
}

void SimBackend::map_ahead(DevicePtr va, std::size_t bytes) {
  const std::size_t g = options_.granularity;
  const std::size_t n = std::min(bytes, std::size_t(64) << 20) / g;
  if (!options_.map_ahead || (n && ahead_pages_ && ahead_va_ == va)) return;
  drop_ahead();
  if (!va || !n) return;  // map_ahead(0, 0): given back
  if (n * g > options_.capacity - used_) return;
  ahead_va_ = va;
  ahead_pages_ = n;
  take_capacity(n * g);
  counts_.ahead_pages += n;
}

ChunkHandle SimBackend::create_paged_chunk_at(std::size_t bytes, std::size_t page, DevicePtr va) {
  const std::size_t g = options_.granularity;
  std::size_t taken = 0;
  if (page == g && va && va == ahead_va_) taken = std::min(ahead_pages_, bytes / g);
  used_ -= taken * g;  // the chunk's now (create_paged_chunk counts them again)
  ahead_pages_ -= taken;
  ahead_va_ += taken * g;
  try {
    return create_paged_chunk(bytes, page);
  } catch (...) {
    take_capacity(taken * g);  // back to waiting, as they were
    ahead_pages_ += taken;
    ahead_va_ -= taken * g;
    throw;
  }
}

void SimBackend::drop_ahead(DevicePtr va, std::size_t bytes) noexcept {
  const std::size_t g = options_.granularity;
  const DevicePtr end = ahead_va_ + ahead_pages_ * g;
  if (!ahead_pages_ || (bytes && (va >= end || ahead_va_ >= va + bytes))) return;
  std::size_t n = ahead_pages_;
  if (bytes && va <= ahead_va_ && va + bytes < end) n = (va + bytes - ahead_va_ + g - 1) / g;  // the front
  ahead_pages_ -= n;
  ahead_va_ += n * g;
  used_ -= n * g;
  counts_.ahead_unused += n;
}

void SimBackend::take_capacity(std::size_t bytes) noexcept {
  const std::size_t now = used_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::size_t peak = peak_used_.load(std::memory_order_relaxed);
  while (now > peak && !peak_used_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

ChunkHandle SimBackend::create_chunk(std::size_t bytes) { return create_paged_chunk(bytes, options_.granularity); }

// Counted as CUDA makes it: one driver allocation per page.
ChunkHandle SimBackend::create_paged_chunk(std::size_t bytes, std::size_t page) {
  if (page != options_.granularity && page != options_.large_page)
    throw BackendError("sim backend: page size " + std::to_string(page) + " is neither the granularity nor the large page");
  if (bytes == 0 || bytes % page)
    throw BackendError("sim backend: chunk size " + std::to_string(bytes) + " is not a multiple of its page");
  if (bytes > options_.capacity - used_)
    throw OutOfMemoryError("sim backend: device full: " + format_bytes(bytes) + " requested, " +
                           format_bytes(options_.capacity - used_) + " free");
  ++counts_.creates;
  counts_.driver_creates += bytes / page;
  take_capacity(bytes);
  chunks_.emplace(next_chunk_, Chunk{bytes, page});
  return next_chunk_++;
}

void SimBackend::release_chunk(ChunkHandle chunk) noexcept {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return;
  drop_ahead();
  const Chunk c = it->second;
  std::size_t gone = 0;  // pages released on their own before
  for (auto p = released_pages_.lower_bound({chunk, 0}); p != released_pages_.end() && p->first == chunk;) {
    gone += c.page;
    p = released_pages_.erase(p);
  }
  ++counts_.chunk_releases;
  counts_.driver_releases += (c.bytes - gone) / c.page;
  used_ -= c.bytes - gone;
  chunks_.erase(it);
}

bool SimBackend::release_chunk_part(ChunkHandle chunk, std::size_t offset, std::size_t bytes) noexcept {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) return false;
  drop_ahead();
  const std::size_t g = it->second.page;
  if ((offset | bytes) % g || offset + bytes > it->second.bytes) return false;
  for (std::size_t at = offset; at < offset + bytes; at += g) {
    if (!released_pages_.emplace(chunk, at).second) continue;
    ++counts_.driver_releases;
    used_ -= g;
  }
  return true;
}

void SimBackend::map(DevicePtr va, std::size_t bytes, ChunkHandle chunk, std::size_t offset) {
  auto it = chunks_.find(chunk);
  if (it == chunks_.end()) throw BackendError("sim backend: map of an unknown chunk");
  const std::size_t page = it->second.page;
  if (bytes == 0 || va % options_.granularity || (bytes | offset) % page || offset + bytes > it->second.bytes)
    throw BackendError("sim backend: map range is unaligned to its chunk's pages or outside the chunk");
  if (auto p = released_pages_.lower_bound({chunk, offset});
      p != released_pages_.end() && p->first == chunk && p->second < offset + bytes)
    throw BackendError("sim backend: map of a page that was released");
  if (mappings_.count(va)) throw BackendError("sim backend: address already mapped");
  ++counts_.maps;
  counts_.driver_maps += bytes / page;
  ++counts_.access_sets;
  counts_.map_bytes += bytes;
  mappings_.emplace(va, bytes);
  mapping_chunk_.emplace(va, chunk);
  ++chunk_map_count_[chunk];
}

void SimBackend::map_run(DevicePtr va, const std::vector<MapCall>& calls) {
  const std::uint64_t access_sets = counts_.access_sets;
  std::size_t run = 0;
  for (const MapCall& c : calls) run += c.bytes;
  drop_ahead(va, run);
  Backend::map_run(va, calls);
  counts_.access_sets = access_sets + (calls.empty() ? 0 : 1);
}

void SimBackend::unmap(DevicePtr va, std::size_t bytes) noexcept {
  auto it = mappings_.find(va);
  if (it == mappings_.end() || it->second != bytes) return;
  ++counts_.unmaps;
  mappings_.erase(it);
  auto chunk = mapping_chunk_.find(va);
  auto owner = chunk == mapping_chunk_.end() ? chunks_.end() : chunks_.find(chunk->second);
  counts_.driver_unmaps += bytes / (owner == chunks_.end() ? options_.granularity : owner->second.page);
  if (chunk != mapping_chunk_.end()) {
    if (--chunk_map_count_[chunk->second] == 0) chunk_map_count_.erase(chunk->second);
    mapping_chunk_.erase(chunk);
  }
}

DevicePtr SimBackend::allocate(std::size_t bytes) {
  std::size_t rounded = round_up(bytes ? bytes : 1, options_.granularity);
  if (rounded > options_.capacity - used_)
    throw OutOfMemoryError("sim backend: device full: " + format_bytes(rounded) + " requested, " +
                           format_bytes(options_.capacity - used_) + " free");
  ++counts_.plain_allocs;
  take_capacity(rounded);
  DevicePtr p = next_va_;
  next_va_ += rounded + options_.granularity;
  plain_.emplace(p, rounded);
  return p;
}

void SimBackend::free(DevicePtr ptr) noexcept {
  auto it = plain_.find(ptr);
  if (it == plain_.end()) return;
  ++counts_.plain_frees;
  used_ -= it->second;
  plain_.erase(it);
}

MemInfo SimBackend::mem_info() { return {options_.capacity - used_, options_.capacity}; }

EventHandle SimBackend::record_event(StreamId stream) { return events_.record(stream); }
bool SimBackend::event_done(EventHandle event) { return events_.done(event); }
void SimBackend::release_event(EventHandle event) noexcept { events_.release(event); }
void SimBackend::synchronize() { events_.complete_all(&counts_.syncs); }
void SimBackend::complete_stream(StreamId stream) { events_.complete(stream); }
std::size_t SimBackend::pending_events() const noexcept { return events_.pending(); }

}  // namespace gpumem
