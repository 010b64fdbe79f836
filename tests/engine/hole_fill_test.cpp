// Growth into holes (Arena::hole_fit / fill_hole) and exact growth at a demand met before.
// The layout, in 2 MiB pages: a [0,3) c [8,11) d [11,18) live; b [3,8) freed and its whole pages [4,8)
// lent to d, so [4,8) is a hole and [3,4) a free part-page that only a block reaching into the hole can
// use. A 4.5 MiB request then maps 4 MiB into the hole and starts at 3 MiB, instead of 6 MiB at the top,
// but only once the work queued before the lend is complete (the hole's old mappings must go first).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "byte_fills.hpp"
#include "gpumem/allocator.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::int64_t reserved(const Allocator& a) { return a.stats().reserved_bytes[kAggregatePool].current; }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
// These tests follow hole filling alone: a free part-page may otherwise be shared by a growth at the top.
AllocatorConfig no_sharing() {
  AllocatorConfig c;
  c.share_part_pages = false;
  return c;
}

struct Layout {
  void *a, *c, *d;
};

Layout hole_beside_a_part_page(Allocator& alloc) {
  Layout l{};
  l.a = alloc.allocate(3 * kMiB, 0);
  void* b = alloc.allocate(5 * kMiB, 0);
  l.c = alloc.allocate(3 * kMiB, 0);
  EXPECT_EQ(addr(b), addr(l.a) + 3 * kMiB);
  EXPECT_EQ(addr(l.c), addr(l.a) + 8 * kMiB);
  alloc.deallocate(b, 0);
  l.d = alloc.allocate(7 * kMiB, 0);  // stitched at the top from b's two whole pages and one new page
  EXPECT_EQ(addr(l.d), addr(l.a) + 11 * kMiB);
  EXPECT_EQ(reserved(alloc), std::int64_t(14 * kMiB));
  return l;
}

TEST(HoleFill, ARequestUsesThePartPageBesideAHoleInsteadOfGrowingAtTheTop) {
  Allocator alloc(std::make_shared<SimBackend>());
  const Layout l = hole_beside_a_part_page(alloc);
  void* e = alloc.allocate(4 * kMiB + kMiB / 2, 0);
  EXPECT_EQ(addr(e), addr(l.a) + 3 * kMiB) << "the free part-page and the hole after it";
  EXPECT_EQ(reserved(alloc), std::int64_t(18 * kMiB)) << "two pages mapped into the hole, not three at the top";
  alloc.check_invariants();
  for (void* p : {l.a, l.c, l.d, e}) alloc.deallocate(p, 0);
  alloc.empty_cache();
  EXPECT_EQ(reserved(alloc), 0);
}

TEST(HoleFill, AHoleWhosePagesWereLentIsNotRemappedBeforeTheLendingStreamGetsThere) {
  SimBackendOptions o;
  o.manual_events = true;
  auto sim = std::make_shared<SimBackend>(o);
  Allocator alloc(sim, no_sharing());
  const Layout l = hole_beside_a_part_page(alloc);
  void* e = alloc.allocate(4 * kMiB + kMiB / 2, 0);
  EXPECT_EQ(addr(e), addr(l.a) + 18 * kMiB) << "work queued before the lend may still read the hole's old mappings";
  alloc.check_invariants();
  void* g = alloc.allocate(kMiB + kMiB / 2, 0);  // the rest of e's last page: the top has no free tail now
  EXPECT_EQ(addr(g), addr(e) + 4 * kMiB + kMiB / 2);
  sim->complete_stream(0);
  void* f = alloc.allocate(4 * kMiB + kMiB / 2, 0);
  EXPECT_EQ(addr(f), addr(l.a) + 3 * kMiB) << "once that work is done the hole can be filled";
  alloc.check_invariants();
  for (void* p : {l.a, l.c, l.d, e, f, g}) alloc.deallocate(p, 0);
}

TEST(HoleFill, NoPageIsLentAndNoEventRecordedDuringACapture) {
  // A CUDA graph is captured on stream 9 while stream 0 grows. Recording or querying an event would break
  // the capture, and so would the wait that a failed growth owes before pages it lent off stream 0's free
  // blocks may go to other streams (CrossStream.AGrowthFailing*): stream 0 lends none, it grows.
  SimBackendOptions o;
  o.manual_events = true;
  auto sim = std::make_shared<SimBackend>(o);
  Allocator alloc(sim, no_sharing());
  const PoolId pool{1, 1};
  alloc.begin_allocate_to_pool(pool, [](StreamId s) { return s == 9; });
  void* a = alloc.allocate(3 * kMiB, 0);
  void* b = alloc.allocate(5 * kMiB, 0);
  void* c = alloc.allocate(3 * kMiB, 0);
  alloc.deallocate(b, 0);
  void* d = alloc.allocate(7 * kMiB, 0);  // outside a capture: b's two whole pages and one new page
  EXPECT_EQ(addr(d), addr(a) + 11 * kMiB);
  EXPECT_EQ(reserved(alloc), std::int64_t(18 * kMiB)) << "b's pages were lent during the capture";
  EXPECT_EQ(sim->pending_events(), 0u);
  alloc.end_allocate_to_pool(pool);
  alloc.check_invariants();
  for (void* p : {a, c, d}) alloc.deallocate(p, 0);
  alloc.release_pool(pool);
}

TEST(HoleFill, FillingAHoleLeavesTheDataOfEveryLiveBlockAlone) {
  HostBackendOptions o;
  o.capacity = std::size_t(256) << 20;
  Allocator alloc(std::make_shared<HostBackend>(o));
  const Layout l = hole_beside_a_part_page(alloc);
  // d's memory includes the pages lent from b, still mapped under the hole until it is filled.
  using testing_fills::Fill;
  std::vector<Fill> fills = {{l.a, 3 * kMiB, 0xA1}, {l.c, 3 * kMiB, 0xC3}, {l.d, 7 * kMiB, 0xD4}};
  for (const Fill& f : fills) testing_fills::fill(f);
  void* e = alloc.allocate(4 * kMiB + kMiB / 2, 0);
  ASSERT_EQ(addr(e), addr(l.a) + 3 * kMiB);
  std::memset(e, 0xE5, 4 * kMiB + kMiB / 2);
  testing_fills::expect_intact(fills);
  alloc.check_invariants();
  for (void* p : {l.a, l.c, l.d, e}) alloc.deallocate(p, 0);
}

TEST(HoleFill, AFreedBlockGrowsInPlaceIntoTheHoleAfterIt) {
  // The LM's logits pattern: a whole-page request a little larger than a freed block whose neighbour's
  // pages were lent away maps only the missing pages after that block, not all of them at the top.
  auto sim = std::make_shared<SimBackend>();
  Allocator alloc(sim);
  void* x = alloc.allocate(8 * kMiB, 0);
  void* y = alloc.allocate(8 * kMiB, 0);
  void* z = alloc.allocate(8 * kMiB, 0);
  alloc.deallocate(y, 0);
  void* w = alloc.allocate(10 * kMiB, 0);  // stitched at the top from y's pages: [8, 16) is a hole now
  EXPECT_EQ(addr(w), addr(x) + 24 * kMiB);
  alloc.deallocate(x, 0);
  const std::uint64_t maps = sim->call_counts().driver_maps;
  void* v = alloc.allocate(12 * kMiB, 0);
  EXPECT_EQ(addr(v), addr(x)) << "x's pages stay where they are";
  EXPECT_EQ(sim->call_counts().driver_maps - maps, 2u) << "two pages into the hole, not six at the top";
  alloc.check_invariants();
  for (void* p : {z, w, v}) alloc.deallocate(p, 0);
}

// A hole between two free blocks larger than the request needs from them: filling it keeps both out of
// stitching, so its 8 MiB would be new memory, while growing at the top lends the two blocks' pages and
// takes none (a LoRA trace scaled x0.99: 174 MB made at its peak beside 604 MB kept).
// In MiB: x0 [0,4) f1 [4,14) h [14,22) f2 [22,32) x1 [32,36); h's pages lent to y at the top.
TEST(HoleFill, NoHoleIsFilledWithNewMemoryWhenTheTopCanBeStitched) {
  for (const bool host : {false, true}) {
    HostBackendOptions o;
    o.capacity = std::size_t(256) << 20;
    Allocator alloc(host ? std::shared_ptr<Backend>(std::make_shared<HostBackend>(o))
                         : std::shared_ptr<Backend>(std::make_shared<SimBackend>()),
                    no_sharing());
    void* x0 = alloc.allocate(4 * kMiB, 0);
    void* f1 = alloc.allocate(10 * kMiB, 0);
    void* h = alloc.allocate(8 * kMiB, 0);
    void* f2 = alloc.allocate(10 * kMiB, 0);
    void* x1 = alloc.allocate(4 * kMiB, 0);
    ASSERT_EQ(addr(x1), addr(x0) + 32 * kMiB);
    alloc.deallocate(h, 0);
    void* y = alloc.allocate(9 * kMiB, 0);  // h's four pages and one new one, at the top
    ASSERT_EQ(addr(y), addr(x0) + 36 * kMiB);
    alloc.deallocate(f1, 0);
    alloc.deallocate(f2, 0);
    const std::int64_t before = reserved(alloc);
    void* r = alloc.allocate(19 * kMiB + kMiB / 2, 0);  // needs f1, the hole and f2, or the top
    EXPECT_EQ(reserved(alloc), before) << "f1's and f2's pages stitched at the top: no new memory";
    EXPECT_EQ(addr(r), addr(x0) + 45 * kMiB) << "at the top, after y's free rest";
    using testing_fills::Fill;
    std::vector<Fill> fills = {{x0, 4 * kMiB, 0x10}, {x1, 4 * kMiB, 0x11}, {y, 9 * kMiB, 0x12},
                               {r, 19 * kMiB + kMiB / 2, 0x13}};
    if (host) {
      for (const Fill& f : fills) testing_fills::fill(f);
      testing_fills::expect_intact(fills);
    }
    alloc.check_invariants();
    for (void* p : {x0, x1, y, r}) alloc.deallocate(p, 0);
    alloc.empty_cache();
    EXPECT_EQ(reserved(alloc), 0) << (host ? "host" : "sim");
  }
}

TEST(ExactGrowth, GrowthAtADemandMetBeforeTakesOnlyWhatIsMissing) {
  Allocator alloc(std::make_shared<SimBackend>());
  // 400 blocks of 3 MiB, every other one freed: each freed block keeps a part-page (1 MiB) that no
  // stitching can use, so 600 MiB are free but only 400 MiB of it in whole pages.
  std::vector<void*> blocks;
  for (int i = 0; i < 400; ++i) blocks.push_back(alloc.allocate(3 * kMiB, 0));
  for (std::size_t i = 1; i < blocks.size(); i += 2) alloc.deallocate(blocks[i], 0);
  const std::int64_t before = reserved(alloc);
  // 1,200 MiB were in use before; 600 MiB + 402 MiB now: the pages missing come exactly, where a
  // growth quantum (1/256 of reserved: 6 MiB) would be taken at a new high.
  void* big = alloc.allocate(402 * kMiB, 0);
  const std::int64_t grown = reserved(alloc) - before;
  EXPECT_GT(grown, 0);
  EXPECT_LE(grown, std::int64_t(4 * kMiB));
  alloc.check_invariants();
  alloc.deallocate(big, 0);
  for (std::size_t i = 0; i < blocks.size(); i += 2) alloc.deallocate(blocks[i], 0);
}

// A 1,000-byte and a 3 MB tensor in turn, each freed at once: the pools' only free pages are lent back
// and forth between the small and the large pool, each round leaving the old mapping under a hole and
// moving the tops on by a page a round. Those old mappings stay bounded (each growth walked them all: a
// replay of 2.5 million such rounds never ended) and drained address ranges are given back (16 GiB
// regions here, 100 GiB of addresses gone through per pool).
TEST(HoleFill, PagesLentBackAndForthBetweenPoolsLeaveBoundedMappingsAndRegions) {
  AllocatorConfig config;
  config.pool_va_bytes = std::size_t(16) << 30;
  Allocator alloc(std::make_shared<SimBackend>(), config);
  std::size_t most_mappings = 0, most_regions = 0;
  for (int round = 0; round < 100000; ++round) {
    alloc.deallocate(alloc.allocate(round % 2 ? 3000001 : 1000, 0), 0);
    if (round % 1000 == 0) {
      const AllocatorSnapshot s = alloc.snapshot();
      most_mappings = std::max(most_mappings, s.mappings.size());
      most_regions = std::max(most_regions, s.regions.size());
    }
  }
  alloc.check_invariants();
  EXPECT_LE(reserved(alloc), std::int64_t(4 * kMiB));
  EXPECT_LE(most_mappings, 2u * (4096 + 16 * 2) + 4) << "one old mapping per round piles up";
  EXPECT_LE(most_regions, 6u) << "regions drained behind the tops";
}

}  // namespace
}  // namespace gpumem
