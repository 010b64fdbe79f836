// An arena: the address space one stream pool hands blocks out of, for one pool kind (small or large).
//
// With virtual memory (VMM backends) an arena is a few large reserved ranges ("regions"). Blocks fill a
// region from its base up to `top`, the end of what is mapped. When no free block fits, the arena grows
// at the top: it maps there physical pieces that are mapped nowhere, then, when memory is tight, the
// physical memory behind free page-aligned ranges anywhere below (stitching, as in GMLake: the same
// pages are mapped a second time at the top and their old addresses become a hole, so no unmap and no
// wait are needed), and only then asks the device for a new chunk. So at the peaks physical memory
// follows live bytes, whatever the address layout. A request that would use the free part-page beside a
// hole grows into that hole instead of at the top (arena_fill.cpp), once the lent pages' old mappings
// there may go. Growth beyond what any earlier growth served takes a quantum more; growth at or below
// it (fragmentation) takes only what is missing. After growths at the top that made new pages, the
// backend may make the next ones ahead of need where the next such growth will go (Backend::map_ahead).
// empty_cache() unmaps the mappings no block uses any more.
// Without virtual memory each region is one plain device allocation (a "segment", as in PyTorch).
//
// Not thread-safe: the owning StreamPool's lock is held for every call; calls that touch physical
// memory take PhysicalMemory's mutex themselves.
#pragma once
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/block.hpp"
#include "engine/event_hub.hpp"
#include "engine/free_index.hpp"
#include "engine/physical_memory.hpp"
#include "gpumem/allocator.hpp"

namespace gpumem::engine {

struct Region {
  DevicePtr base = 0;
  std::size_t size = 0;
  std::size_t top = 0;  // bytes from base that are mapped or holes; VMM regions only
  bool plain = false;
  bool small = false;  // a small pool's arena (its blocks may be large requests: see StreamPool)
  Block* first = nullptr;
  Block* last = nullptr;
};

class Arena {
 public:
  Arena(Backend& backend, PhysicalMemory& physical, BlockRecycler& recycler, const AllocatorConfig& config,
        StreamId stream, bool small_pool, const EventHub& hub);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // A free block that holds `size` bytes, or nullptr: for whole pages, one where they can lie on page
  // boundaries (see start_in) if there is one, else any that is large enough. While packing (see
  // packing()), nullptr also when every such block would strand free bytes beside the new one: growing
  // is to be tried first, and find_fit() when it fails.
  Block* find(std::size_t size) const noexcept {
    Block* b = find_fit(size);
    return b && packs(size) ? find_packed(b, size) : b;
  }
  // find() without packing: any free block that holds `size` bytes.
  Block* find_fit(std::size_t size) const noexcept {
    Block* b = free_.find(size);
    return b && align_blocks_ ? find_aligned(b, size) : b;
  }
  // Packing: past 90% of the ceiling (the limit, else the device's memory) memory is what may run
  // short, and free bytes left in a page beside a live block can be neither lent nor given back until
  // that block goes. A request whose size is not whole pages placed at the start of a larger free range
  // leaves such a part-page behind it (a KV cache grown by torch.cat: one per layer, 1.15-1.26x its live
  // bytes at the smallest limit it ran under). So then a request of a size not freed recently takes a
  // free block only where it strands no more free bytes than are stranded there already; else it grows
  // at the top, packed beside the block before (whose part-page it takes, see SharePlan) from pages lent
  // by free ranges, and fills no hole (a hole's free neighbour would become such a part-page). More
  // map calls, fewer stranded bytes. A size freed recently (freed_sizes_) keeps taking its old place:
  // training repeats its sizes every step, and packing them remapped pages every step (ViT under a
  // 1.02x limit: 359,000 driver calls instead of 18,000). Packing from half the ceiling on remapped as
  // much whenever a large job used half the device; below 90% nothing changes.
  bool packing() const noexcept;
  // Whether a request of `size` bytes is placed packed now (see packing()).
  bool packs(std::size_t size) const noexcept {
    return size % granularity_ && packing() && freed_sizes_[freed_slot(size)] != size;
  }
  // Makes room for `size` bytes and returns a free block that holds them (whole pages on page
  // boundaries). Throws OutOfMemoryError.
  Block* grow(std::size_t size);
  // Carves `size` bytes out of free block `b` where start_in() puts them, else at its start; returns the
  // (now allocated) block. What lies before or after it stays free.
  Block* take(Block* b, std::size_t size);
  // Allocates exactly [addr, addr+size) out of the free block covering it; nullptr if that range is not
  // free here. For restoring a private pool's checkpoint.
  Block* take_at(DevicePtr addr, std::size_t size);
  // What holds addr here, in words ("a free block of 2.00 MiB at ...", "a hole", ...; empty if no region
  // of this arena covers it): for errors that name an address.
  std::string describe_at(DevicePtr addr) const;
  // Returns an allocated or pending block to the free set, merging it with free neighbours; returns the
  // free block that holds it now.
  Block* release(Block* b) noexcept;
  // After the program freed a block (release() gave `b`): where b holds all of this address's bytes of a
  // page shared with another address that still uses the rest, the free bytes move there (see SharePlan).
  void settle_shared(Block* b) noexcept;
  // Unmaps every fully free mapped range (VMM) or frees every fully free segment (plain).
  // Returns the bytes of physical memory that became unused.
  std::size_t release_cached();
  // Stitching for another stream's pool: lends like lend() below once the work queued on this arena's
  // stream is done (its free blocks may still be read by that work). `wait`: waits for the stream when
  // it is busy; else lends only if it is found idle without waiting. Returns bytes lent.
  std::size_t lend_to_other_stream(std::size_t bytes, std::vector<Piece>& out, bool wait);

  bool small_pool() const noexcept { return small_; }
  // The other arena of the same pool: when growing, its fully free pages are taken too.
  void set_sibling(Arena* sibling) noexcept { sibling_ = sibling; }
  // A private (graph) pool never stitches: a captured graph keeps using the addresses of its free blocks,
  // and checkpoints are restored at exact addresses, so free ranges must never become holes.
  void disable_stitching() noexcept { stitching_ = false; }
  // The allocator's count of CUDA graph captures underway: while it is non-zero no event is recorded or
  // queried (see note_lend).
  void set_capture_count(const std::atomic<int>& captures) noexcept { captures_ = &captures; }
  std::size_t free_blocks() const noexcept { return free_.count(); }
  std::size_t free_bytes() const noexcept { return free_.bytes(); }
  std::size_t largest_free() const noexcept { return free_.largest(); }
  std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }

  template <typename Fn>
  void for_each_block(Fn&& fn) const {
    for (const auto& r : regions_)
      for (Block* b = r->first; b; b = b->next) fn(*r, b);
  }
  template <typename Fn>
  void for_each_region(Fn&& fn) const {
    for (const auto& r : regions_) fn(*r);
  }
  // fn(va, bytes, chunk index, offset in the chunk) for every mapping, in address order (VMM only).
  template <typename Fn>
  void for_each_mapping(Fn&& fn) const {
    for (const auto& [va, m] : mappings_) fn(va, m.bytes, m.piece.chunk, m.piece.offset);
  }
  bool owns(DevicePtr p) const noexcept;
  // The physical pieces behind [start, start+bytes), page-aligned and mapped, in address order; throws
  // gpumem::Error when that memory is a plain segment (no pieces to share).
  std::vector<Piece> pieces_behind(DevicePtr start, std::size_t bytes) const;
  // The whole physical pages under [start, end): what pieces_behind() can be asked for.
  std::pair<DevicePtr, DevicePtr> page_span(DevicePtr start, DevicePtr end) const {
    return {page_floor(start), page_ceil(end)};
  }
  // Throws gpumem::Error at the first broken invariant.
  void check_invariants() const;

 private:
  struct Mapping {
    std::size_t bytes;
    Piece piece;
    std::uint64_t lent = 0;  // under a hole: the lend() that took its page elsewhere (see lends_done)
  };
  // Filling a hole (arena_fill.cpp). Stitching leaves holes beside live blocks, and the free part of a
  // page a live block shares with a hole can be neither lent nor given back: with growing tensors (a KV
  // cache) such part-pages pile up; and a freed block a little smaller than the next request would be
  // remapped whole at the top (an LM's logits, sized by each step's sequence length). Growth that needs
  // fewer new pages when mapped into a hole next to a free block goes there, so the free block becomes
  // part of the new one (whole-page requests only after a block that starts on a page).
  struct HoleFit {
    Block* hole = nullptr;
    bool from_front = true;  // mapped from the hole's start (beside the free block before it), else up to its end
    std::size_t bytes = 0;   // pages to map there
  };
  HoleFit hole_fit(std::size_t size);
  // Maps `pieces` into fit.hole (at its start or up to its end) and returns the free block there.
  Block* fill_hole(const HoleFit& fit, std::vector<Piece>& pieces);
  // Whether filling `bytes` of fit.hole may replace the old mappings there: each one's lend is done
  // (lends numbered up to `done` are).
  bool fill_ready(const HoleFit& fit, std::size_t bytes, std::uint64_t done) const;
  // Sharing a page (arena_share.cpp). A free part-page beside a live block can be neither lent nor given
  // back, and generation workloads leave one beside many KV-cache tensors (2% of the peak). A growth at
  // the top whose size is not whole pages may start its new run with such a page (the free bytes at
  // its end: a "head") and end it with one (the free bytes at its start: a "tail"): the page is mapped
  // a second time there, the new block uses only the bytes that were free, and on each side the bytes
  // the other address uses become `shared` blocks, never handed out. Each address gives back only its
  // own bytes (PhysicalMemory joins the parts of a page). Only when it saves new pages.
  struct SharePlan {
    Block* head = nullptr;  // free block starting inside a page: that page's rest starts the new run
    Block* tail = nullptr;  // free block ending inside a page: that page's start ends the new run
    std::size_t head_bytes = 0, tail_bytes = 0;  // the free part-page each gives
    std::size_t pages = 0;                       // new bytes between them (whole granules)
    // A part-page shared before: the block at its other address that uses the page's other bytes, and
    // that address's page (part_page_source); both learn of the new address.
    Block *head_owner = nullptr, *tail_owner = nullptr;
    DevicePtr head_owner_page = 0, tail_owner_page = 0;
    explicit operator bool() const noexcept { return head || tail; }
  };
  // The plan that needs fewest new bytes for `size`, if fewer than `need` (growth at the top without).
  SharePlan share_plan(const Block* top_tail, std::size_t size, std::size_t need) const;
  // Maps plan.head's page, `pieces`, plan.tail's page at the top; returns the free block between.
  Block* map_shared_at_top(Region& r, Block* top_tail, const SharePlan& plan, std::vector<Piece>& pieces);
  // The one-page mapping that holds p; nullptr if p is not inside such a mapping.
  const Mapping* page_mapping(DevicePtr p, DevicePtr* start) const;
  // Free part-page b of the page [start, end) here, as a head or tail to share: true when the page's
  // other bytes are used here (the usual case) or are one shared block whose owner holds a shared block
  // over exactly b's bytes pointing back here (a page shared a second time: *owner_block is that block and
  // *owner_page its page, so that both addresses are told of the new one); false for anything else.
  bool part_page_source(const Block* b, DevicePtr start, DevicePtr end, Block** owner_block,
                        DevicePtr* owner_page) const;
  // The shared block at address q over exactly [page + offset, + bytes) of the physical page mapped here
  // at `page` (q maps the same page), pointing back to `page`: the partner of a page used at two
  // addresses. nullptr if there is none.
  Block* shared_partner(DevicePtr page, const Mapping& here, DevicePtr q, std::size_t offset, std::size_t bytes) const;
  // When every block of b's page is shared, they become a hole, its mapping removable like a lent page's.
  void retire_if_all_shared(Block* b) noexcept;

  // A lent page stays mapped at its old address (its hole) until that address is reused; the mapping
  // may be removed once the work queued before the lend completed: lends are numbered, an event per
  // lend, and lends_done() is the last lend known complete. During a CUDA graph capture no event is
  // recorded or queried (it would break the capture): lends then wait for unmap_unused().
  std::uint64_t note_lend(bool synchronized);
  std::uint64_t lends_done();
  bool capturing() const noexcept;
  // Maps pieces from `at`, one mapping per page (empty_cache gives back single pages), access granted
  // once; records the mappings. Gives the pieces back to the physical pool if mapping fails. `first` and
  // `last` (pages mapped elsewhere too, see SharePlan) go before and after them.
  // `front_chunk`: that chunk's pieces go first (pages made ahead at `at`, see create_paged).
  std::size_t map_pieces(DevicePtr at, std::vector<Piece>& pieces, const Piece* first = nullptr,
                         const Piece* last = nullptr, std::size_t front_chunk = kNoChunk);
  // Page placement (large arenas over virtual memory): a request of whole pages gets whole pages, so
  // that once it is freed they can be stitched elsewhere or given back. Packed at any 512-byte address
  // it would straddle one page more, and every free range it leaves would keep a part-page at each
  // end, used by neither stitching nor empty_cache() while the neighbours live (llama_generate at
  // 2 MiB pages: 16 MiB of such part-pages at the peak). Other sizes stay packed: aligning them would
  // leave a gap before each one that often nothing fills.
  // Where `size` bytes go in free block `b` (at least `size` bytes): at its start when that is a page
  // boundary or `size` is not whole pages; else at its end when that is a page boundary (the free rest
  // stays one range, in front; never at the region's top, where the rest must stay to grow into);
  // else at its first page boundary (page_start); 0 when they do not fit there.
  DevicePtr start_in(const Block* b, std::size_t size) const noexcept;
  // The first page boundary from `addr`, unless the gap it leaves would exceed half of `size`: then
  // `addr`, packed: a gap over half the block costs more than the page its alignment saves.
  DevicePtr page_start(DevicePtr addr, std::size_t size) const noexcept;
  Block* find_aligned(Block* fit, std::size_t size) const noexcept;
  // `fit` or, in a bounded look at free blocks up to about twice `size`, the first where placing `size`
  // at its start adds at most size/64 stranded bytes; nullptr when each adds more.
  Block* find_packed(Block* fit, std::size_t size) const noexcept;
  // Free bytes of [start, end) in pages it shares with other blocks (granules at both ends).
  std::size_t stranded(DevicePtr start, DevicePtr end) const noexcept;
  // Splits free block `b` at `at` (inside it): the front part stays free; returns the part from `at`.
  Block* split_free(Block* b, DevicePtr at);
  Block* take_front(Block* b, std::size_t size);
  // A new block of `bytes` in `state` before free block b, which keeps the rest; returns the new block.
  Block* insert_front(Block* b, std::size_t bytes, BlockState state);
  // Links a new block of the first `bytes` of b before it; the caller shrinks b (insert_front, holes).
  Block* link_front(Block* b, std::size_t bytes, BlockState state);
  Block* grow_virtual(std::size_t size);
  // The free block that ends at the region's top, if any; the bytes to map at the top for `size`.
  Block* free_tail(const Region& r) const noexcept;
  std::size_t top_need(const Region& r, const Block* tail, std::size_t size) const noexcept;
  Block* grow_plain(std::size_t size);
  Region& new_region(std::size_t min_bytes);
  // Gives back the address range of every region that holds nothing but unmapped holes (packing moves
  // the top ten times faster through the address space, and a KV cache replaced in order leaves whole
  // regions drained behind it; pages lent back and forth move it a page a round). Called when a new
  // region is needed.
  void release_drained_regions();
  std::size_t chunk_quantum() const;
  std::size_t device_total();
  // Stitching: hands the physical memory behind free, page-aligned ranges (never inside `keep`) to
  // `out` until `bytes` are covered (one range that covers them within an eighth, else the largest
  // first), leaving holes where it was. The memory stays mapped there too, unused: lending needs no
  // unmap and no synchronisation (see note_lend for when that mapping may go). Returns bytes lent.
  struct Keep {  // free blocks that lending must leave alone
    const Block* blocks[3] = {nullptr, nullptr, nullptr};
    bool has(const Block* b) const noexcept { return b == blocks[0] || b == blocks[1] || b == blocks[2]; }
  };
  // `other`: lending to another stream's pool, so this stream's queued work must be done first (see
  // lend_to_other_stream: waited for, or only if found done).
  enum class OtherStream { no, wait, if_idle };
  std::size_t lend(std::size_t bytes, Keep keep, std::vector<Piece>& out, OtherStream other = OtherStream::no);
  // Whether the work queued on this arena's stream so far is done, asked without waiting (an event
  // recorded and queried at once); false when the backend cannot tell.
  bool stream_idle() const noexcept;
  // Pages for growth by `need` bytes, at most `room`: mapped nowhere, then (when memory is tight)
  // lent from free ranges outside `keep`, then new chunks. Returns with at least `need` bytes more in
  // `pieces`, or throws OutOfMemoryError having added nothing.
  // `at`: where the pieces will be mapped (the top), so that new pages may be ones made ahead there.
  void gather(std::size_t need, std::size_t room, Keep keep, std::vector<Piece>& pieces, DevicePtr at = 0);
  // Gives a failed growth's pieces back to the shared pool, after waiting for this stream when some were
  // lent by its own free blocks this growth (lent_unwaited_): work queued here may still read them.
  void return_pieces(const std::vector<Piece>& pieces) noexcept;
  void collect_physical(DevicePtr start, std::size_t bytes, std::vector<Piece>& out) const;
  // Unmaps one mapping (reported as segment_unmap) and forgets it; returns the next.
  std::map<DevicePtr, Mapping>::iterator unmap_mapping(std::map<DevicePtr, Mapping>::iterator it) noexcept;
  // Unmaps every mapping under which no block is in use; returns the bytes that became free pieces.
  std::size_t unmap_unused();
  // Lent pages' old mappings not filled again would pile up until empty_cache(): packing fills no hole
  // (a KV cache under a limit: 14,000 for 130 pages), and two pools lending their only free pages back
  // and forth leave one a round. Once the mappings are more than twice the pages in use and than after
  // the last time (16 times, and 4,096 more, when not packing: most are filled again soon), those of
  // lends known complete go (as fill_hole removes them). Called at every growth over virtual memory.
  void unmap_done_lends();
  Region* region_of(DevicePtr p) const noexcept;
  Block* block_containing(const Region& r, DevicePtr p) const noexcept;
  bool covered(DevicePtr start, std::size_t bytes) const;
  Block* map_at_top(Region& r, Block* tail, std::vector<Piece>& pieces, std::size_t front_chunk = kNoChunk);
  // New chunks of at least `want` bytes in all (a growth quantum if it fits in `room` and the limit),
  // added to `out`.
  void create_for(std::size_t want, std::size_t room, std::vector<Piece>& out, DevicePtr at);
  void create_paged(std::size_t bytes, std::size_t want, std::vector<Piece>& out, DevicePtr at);
  // After growths at the top that made new pages (`made` bytes this time) for a new high of demand: the
  // next such growth will likely come at the new top, so the backend may make its pages ahead there
  // (Backend::map_ahead).
  void map_ahead(const Region& r, std::size_t made);
  static constexpr std::size_t kNoChunk = ~std::size_t(0);
  // Physical memory splits only between mappings (one physical page each): page_floor(p) is the start
  // of the mapping that holds p, page_ceil(p) its end unless p starts it; p itself outside mappings.
  DevicePtr page_floor(DevicePtr p) const;
  DevicePtr page_ceil(DevicePtr p) const;
  Block* extend_top(Region& r, Block* tail, std::size_t bytes);
  // Makes [hole, hole+bytes) of free block `b` a hole (or `state`, shared); returns the free block after
  // it, if any.
  Block* carve_hole(Block* b, DevicePtr hole, std::size_t bytes, BlockState state = BlockState::hole,
                    DevicePtr partner = 0);
  // Makes shared block `b` a hole (its mapping is gone), merged with the holes beside it.
  void shared_to_hole(Block* b);
  // A new block of `state` for [at, at + bytes) after the region's last (indexed when free).
  Block* append_new(Region& r, DevicePtr at, std::size_t bytes, BlockState state);
  void append_block(Region& r, Block* b);
  void insert_after(Block* pos, Block* b);
  void unlink(Block* b);

  Backend& backend_;
  PhysicalMemory& physical_;
  BlockRecycler& recycler_;
  const AllocatorConfig& config_;
  StreamId stream_;
  bool small_;
  const EventHub& hub_;
  std::size_t granularity_;
  std::size_t device_total_ = 0;  // the device's memory, asked once (device_total)
  FreeIndex free_;
  Arena* sibling_ = nullptr;
  bool stitching_ = true;
  const std::atomic<int>* captures_ = nullptr;
  bool align_blocks_;  // large arena over virtual memory: see start_in
  std::vector<std::unique_ptr<Region>> regions_;
  std::map<DevicePtr, Mapping> mappings_;  // va -> mapping, VMM regions only
  std::size_t mapped_bytes_ = 0;
  std::deque<std::pair<std::uint64_t, EventHandle>> lend_events_;  // lends not yet known complete
  std::uint64_t lends_ = 0, lends_done_ = 0;
  std::size_t mappings_after_sweep_ = 0;  // see unmap_done_lends
  // The sizes of blocks freed lately, one per slot of a hash of the size (see packing()).
  static std::size_t freed_slot(std::size_t size) noexcept { return (size / 512 * 0x9E3779B97F4A7C15ull) >> 54; }
  std::array<std::size_t, 1024> freed_sizes_{};
  std::size_t demand_high_ = 0;  // the most bytes in use plus requested at any growth so far
  bool exact_growth_ = false;    // this growth's demand was met before: fragmentation, not a new high
  bool lent_unwaited_ = false;   // this growth took pages of this stream's free blocks (see return_pieces)
  // Pages made ahead (map_ahead): the chunk create_paged made for the address gather() was given and its
  // bytes; top growths in a row that made new pages; bytes asked ahead not yet grown over; bytes asked
  // ahead that growths used / mapped other pages over.
  std::size_t made_at_ = kNoChunk, made_at_bytes_ = 0;
  std::size_t fresh_growths_ = 0;
  std::size_t ahead_run_ = 0, ahead_used_ = 0, ahead_wasted_ = 0;
};

}  // namespace gpumem::engine
