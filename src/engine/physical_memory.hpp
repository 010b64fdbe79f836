// Physical memory shared by every arena of one allocator: the chunks taken from the device, the
// pieces of them that are currently mapped nowhere (free to be stitched into any arena), the limit,
// and the segment / reserved statistics. Every method requires mutex() to be held, except reserved() and
// limit(), which may be read without it (a moment's value).
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "gpumem/backend.hpp"
#include "gpumem/stats.hpp"

namespace gpumem::engine {

// A range of one chunk: what one map() call puts behind a virtual range.
struct Piece {
  std::size_t chunk = 0;  // index into the chunk table
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

class PhysicalMemory {
 public:
  explicit PhysicalMemory(Backend& backend) : backend_(backend) {}
  ~PhysicalMemory();

  std::mutex& mutex() { return mutex_; }

  std::size_t reserved() const { return reserved_.load(std::memory_order_relaxed); }
  std::size_t limit() const { return limit_.load(std::memory_order_relaxed); }
  void set_limit(std::size_t bytes) { limit_.store(bytes, std::memory_order_relaxed); }
  std::size_t free_piece_bytes() const { return free_piece_bytes_; }
  // Bytes given back as parts of pages whose rest is still mapped (see give_piece).
  std::size_t part_page_bytes() const { return part_page_bytes_; }

  // Moves at least `bytes` (or all there is) of unmapped pieces into `out`, largest first; the last one
  // split at a page of its chunk, so up to a page less one granule more may come.
  std::size_t take_pieces(std::size_t bytes, std::vector<Piece>& out);
  // Puts pieces back into the free set, merging neighbours of the same chunk. A part of one page (a page
  // that two addresses shared, each giving back its own bytes) waits until the rest of that page is back.
  void give_piece(const Piece& piece);
  // A new chunk from the device in pages of `page` bytes (Backend::create_paged_chunk), entirely in the
  // returned piece. Throws OutOfMemoryError when the limit or the device has no room; nothing changes then.
  // `at`: where the caller will map it (Backend::create_paged_chunk_at: pages made ahead there), or 0.
  Piece create_chunk(std::size_t bytes, bool small_pool, std::size_t page, DevicePtr at = 0);
  // The next chunk will likely be mapped from `at` on (Backend::map_ahead).
  void map_ahead(DevicePtr at, std::size_t bytes) { backend_.map_ahead(at, bytes); }
  // Gives every free piece back to the device: whole chunks that nothing maps any more, and the pages of
  // the others where the backend can release part of a chunk. Returns the bytes given back.
  std::size_t release_unused_chunks();
  void map(DevicePtr va, const Piece& piece);
  // Maps pieces one after another from va, each its own mapping, granting access once (Backend::map_run).
  void map_run(DevicePtr va, const std::vector<Piece>& pieces);
  void unmap(DevicePtr va, const Piece& piece) noexcept;

  // Plain (non-VMM) segments.
  DevicePtr allocate_segment(std::size_t bytes, bool small_pool);
  void free_segment(DevicePtr ptr, std::size_t bytes, bool small_pool) noexcept;

  // Stitching across streams: asked (with mutex() held) for up to `bytes` of pages behind free ranges of
  // the pools other than `asking`'s; the allocator installs it. Returns the bytes added to `out`.
  using ForeignLender = std::function<std::size_t(std::size_t bytes, const void* asking, std::vector<Piece>& out)>;
  void set_foreign_lender(ForeignLender lender) { foreign_lender_ = std::move(lender); }
  std::size_t lend_foreign(std::size_t bytes, const void* asking, std::vector<Piece>& out) {
    return foreign_lender_ ? foreign_lender_(bytes, asking, out) : 0;
  }
  ChunkHandle handle_of(std::size_t chunk) const { return chunks_[chunk].handle; }
  std::size_t bytes_of(std::size_t chunk) const { return chunks_[chunk].bytes; }
  // Pieces of a chunk are mapped, lent and released only in whole pages of this size.
  std::size_t page_of(std::size_t chunk) const { return chunks_[chunk].page; }

  bool would_exceed_limit(std::size_t more) const { return limit() && reserved() + more > limit(); }

  const StatArray& segment_stats() const { return segment_; }
  const StatArray& reserved_stats() const { return reserved_bytes_; }
  std::int64_t device_allocs() const { return device_allocs_; }
  std::int64_t device_frees() const { return device_frees_; }
  void reset_peaks();
  void reset_accumulated();
  // Throws gpumem::Error if the free-piece accounting is inconsistent.
  void check_invariants() const;

 private:
  struct Chunk {
    ChunkHandle handle = 0;
    std::size_t bytes = 0;
    std::size_t free_bytes = 0;  // bytes of this chunk in free pieces
    std::size_t mappings = 0;    // live map() calls on it: it can be released only when none is left
    std::size_t released = 0;    // bytes given back on their own (Backend::release_chunk_part)
    std::size_t page = 0;        // its physical pages' size
    bool small_pool = false;
    bool live = false;
  };
  void count_segment(std::size_t bytes, bool small_pool, bool added);
  // The cause of an out-of-memory error at the limit. No byte counts: pages this growth made before it
  // failed go back before the error is seen, so its figures (the message's own) would contradict them.
  std::string limit_crossed() const { return "the allocator's limit of " + format_bytes(limit()) + " would be crossed"; }
  void count_reserved(std::size_t bytes, bool small_pool, bool added);

  Backend& backend_;
  std::mutex mutex_;
  std::vector<Chunk> chunks_;
  std::vector<std::size_t> dead_chunk_slots_;
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> free_pieces_;  // (chunk, offset) -> bytes
  std::map<std::pair<std::size_t, std::size_t>, std::size_t> part_pages_;   // (chunk, page) -> bytes back
  std::size_t free_piece_bytes_ = 0;
  std::size_t part_page_bytes_ = 0;
  std::atomic<std::size_t> reserved_{0};  // written under mutex(); read anywhere
  std::atomic<std::size_t> limit_{0};
  StatArray segment_{}, reserved_bytes_{};
  std::int64_t device_allocs_ = 0, device_frees_ = 0;
  ForeignLender foreign_lender_;
};

}  // namespace gpumem::engine
