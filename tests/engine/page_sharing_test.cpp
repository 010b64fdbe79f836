// Sharing a part-page (Arena::share_plan / map_shared_at_top / settle_shared).
// The layout, in MiB (2 MiB pages): a [0,3) c [8,11) d [11,18) live; b [3,8) freed and its whole pages
// [4,8) lent to d, so [3,4) is a free part-page of page [2,4), whose other half a uses. A 6.5 MiB request
// fits neither that part-page nor the hole after it: at the top it needs 4 new pages, or 3 when page
// [2,4) is mapped again first, at 18, and the new block starts at 19 where its free half lies.
#include <gtest/gtest.h>

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
std::size_t device_used(Backend& b) {
  MemInfo m = b.mem_info();
  return m.total - m.free;
}

struct Layout {
  void *a, *c, *d, *e;
};

Layout share_a_part_page(Allocator& alloc) {
  Layout l{};
  l.a = alloc.allocate(3 * kMiB, 0);
  void* b = alloc.allocate(5 * kMiB, 0);
  l.c = alloc.allocate(3 * kMiB, 0);
  alloc.deallocate(b, 0);
  l.d = alloc.allocate(7 * kMiB, 0);  // stitched at the top from b's two whole pages and one new page
  EXPECT_EQ(addr(l.d), addr(l.a) + 11 * kMiB);
  l.e = alloc.allocate(6 * kMiB + kMiB / 2, 0);
  return l;
}

std::string state_at(const Allocator& alloc, std::uintptr_t at) {
  for (const SnapshotRegion& r : alloc.snapshot().regions)
    for (const SnapshotBlock& b : r.blocks)
      if (at >= b.addr && at < b.addr + b.size) return snapshot_block_state_name(b.state);
  return "none";
}

TEST(PageSharing, AGrowthAtTheTopTakesAlongTheFreeHalfOfAPageBesideALiveBlock) {
  auto sim = std::make_shared<SimBackend>();
  Allocator alloc(sim);
  const Layout l = share_a_part_page(alloc);
  EXPECT_EQ(addr(l.e), addr(l.a) + 19 * kMiB) << "page [2,4) mapped again at 18; its free half starts e";
  EXPECT_EQ(reserved(alloc), std::int64_t(20 * kMiB)) << "three new pages, not four";
  EXPECT_EQ(state_at(alloc, addr(l.a) + 3 * kMiB), "hole") << "the half e uses is no longer free at 3";
  EXPECT_EQ(state_at(alloc, addr(l.a) + 18 * kMiB), "hole") << "the half a uses is never handed out at 18";
  alloc.check_invariants();

  AllocatorConfig config;
  config.share_part_pages = false;
  Allocator plain(std::make_shared<SimBackend>(), config);
  const Layout p = share_a_part_page(plain);
  EXPECT_EQ(addr(p.e), addr(p.a) + 18 * kMiB);
  EXPECT_EQ(reserved(plain), std::int64_t(22 * kMiB));
  for (Allocator* x : {&alloc, &plain}) {
    const Layout& y = x == &alloc ? l : p;
    for (void* q : {y.a, y.c, y.d, y.e}) x->deallocate(q, 0);
    x->empty_cache();
    EXPECT_EQ(reserved(*x), 0);
    x->check_invariants();
  }
  EXPECT_EQ(device_used(*sim), 0u) << "both halves came back, so the page went back to the device";
}

TEST(PageSharing, BothAddressesKeepTheirOwnBytes) {
  HostBackendOptions o;
  o.capacity = std::size_t(256) << 20;
  Allocator alloc(std::make_shared<HostBackend>(o));
  Layout l = share_a_part_page(alloc);
  ASSERT_EQ(addr(l.e), addr(l.a) + 19 * kMiB);
  using testing_fills::Fill;
  std::vector<Fill> fills = {{l.a, 3 * kMiB, 0xA1}, {l.c, 3 * kMiB, 0xC3}, {l.d, 7 * kMiB, 0xD4},
                             {l.e, 6 * kMiB + kMiB / 2, 0xE5}};
  for (const Fill& f : fills) testing_fills::fill(f);
  testing_fills::expect_intact(fills);
  // a freed while e lives: a's half of the page moves to e's address (settle_shared); once e is freed
  // too the page is whole there, and a new block over it must not touch c or d.
  alloc.deallocate(l.a, 0);
  alloc.deallocate(l.e, 0);  // (a is coalesced here: a freed block waits for the next call)
  EXPECT_EQ(state_at(alloc, addr(l.e) - kMiB), "free") << "the half a held is free at e's address now";
  fills.erase(fills.begin());
  fills.pop_back();
  void* g = alloc.allocate(8 * kMiB, 0);
  EXPECT_EQ(addr(g), addr(l.e) - kMiB);
  fills.push_back({g, 8 * kMiB, 0xF6});
  testing_fills::fill(fills.back());
  testing_fills::expect_intact(fills);
  alloc.check_invariants();
  for (const Fill& x : fills) alloc.deallocate(x.p, 0);
  alloc.empty_cache();
  EXPECT_EQ(reserved(alloc), 0);
}

TEST(PageSharing, TheOldAddressFreedFirstMakesThePageWholeAtTheNewOne) {
  auto sim = std::make_shared<SimBackend>();
  Allocator alloc(sim);
  const Layout l = share_a_part_page(alloc);
  alloc.deallocate(l.a, 0);
  alloc.deallocate(l.e, 0);  // [18, 26) is four whole free pages now
  const std::int64_t before = reserved(alloc);
  void* g = alloc.allocate(8 * kMiB, 0);
  EXPECT_EQ(addr(g), addr(l.a) + 18 * kMiB);
  EXPECT_EQ(reserved(alloc), before) << "no growth: the shared page is whole again";
  alloc.check_invariants();
  for (void* p : {l.c, l.d, g}) alloc.deallocate(p, 0);
  alloc.empty_cache();
  EXPECT_EQ(reserved(alloc), 0);
  EXPECT_EQ(device_used(*sim), 0u);
}

TEST(PageSharing, TheNewAddressFreedFirstGivesBackItsHalfOnlyWithTheOther) {
  auto sim = std::make_shared<SimBackend>();
  Allocator alloc(sim);
  const Layout l = share_a_part_page(alloc);
  alloc.deallocate(l.e, 0);
  alloc.empty_cache();
  // a, c, d live: pages [0,2) [2,4) [8,10) [10,12) and d's three others; e's half of [2,4) waits for a's.
  EXPECT_EQ(reserved(alloc), std::int64_t(14 * kMiB));
  EXPECT_EQ(device_used(*sim), 14 * kMiB);
  alloc.check_invariants();
  alloc.deallocate(l.a, 0);
  alloc.empty_cache();
  EXPECT_EQ(reserved(alloc), std::int64_t(10 * kMiB)) << "c and d's pages";
  EXPECT_EQ(device_used(*sim), 10 * kMiB);
  alloc.check_invariants();
  for (void* p : {l.c, l.d}) alloc.deallocate(p, 0);
  alloc.empty_cache();
  EXPECT_EQ(device_used(*sim), 0u);
}

// A page shared a second time: e freed and f over its whole pages leave [19,20), e's half of page [2,4)
// at address 18, free; a 2.5 MiB request maps that page a third time, at 26, and starts at 27. Address 18
// is all shared then (a hole); a's half at 2 must now move to 26 when a is freed (its partner is 26, no
// longer 18), so that the page is whole there once the new block is freed too. Before, each side waited
// for address 18: the page was free at 2 and at 26 and could be neither lent nor reused whole (a threaded
// server with a stream per thread held 138 MB of such pages at its peak).
TEST(PageSharing, APageSharedASecondTimeIsWholeAgainWhereItWasLastMapped) {
  for (const bool host : {false, true}) {
    HostBackendOptions o;
    o.capacity = std::size_t(256) << 20;
    Allocator alloc(host ? std::shared_ptr<Backend>(std::make_shared<HostBackend>(o))
                         : std::shared_ptr<Backend>(std::make_shared<SimBackend>()));
    const Layout l = share_a_part_page(alloc);
    ASSERT_EQ(addr(l.e), addr(l.a) + 19 * kMiB);
    alloc.deallocate(l.e, 0);
    void* f = alloc.allocate(6 * kMiB, 0);
    ASSERT_EQ(addr(f), addr(l.a) + 20 * kMiB) << "whole pages on a page boundary: [19,20) stays free";
    const std::int64_t before = reserved(alloc);
    void* g = alloc.allocate(2 * kMiB + kMiB / 2, 0);
    EXPECT_EQ(addr(g), addr(l.a) + 27 * kMiB) << "page [2,4) mapped a third time at 26; its free half starts g";
    EXPECT_EQ(reserved(alloc), before + std::int64_t(2 * kMiB)) << "one new page, not two";
    EXPECT_EQ(state_at(alloc, addr(l.a) + 18 * kMiB), "hole") << "the second address uses none of the page now";
    using testing_fills::Fill;
    std::vector<Fill> fills = {{l.a, 3 * kMiB, 0xA1}, {l.c, 3 * kMiB, 0xC3}, {l.d, 7 * kMiB, 0xD4},
                               {f, 6 * kMiB, 0xF6}, {g, 2 * kMiB + kMiB / 2, 0x97}};
    if (host) {
      for (const Fill& x : fills) testing_fills::fill(x);
      testing_fills::expect_intact(fills);
    }
    alloc.deallocate(l.a, 0);
    alloc.deallocate(g, 0);
    EXPECT_EQ(state_at(alloc, addr(l.a) + 26 * kMiB), "free") << "the half a held moved to the newest address";
    EXPECT_EQ(state_at(alloc, addr(l.a) + 2 * kMiB), "hole");
    void* h = alloc.allocate(4 * kMiB, 0);
    EXPECT_EQ(addr(h), addr(l.a) + 26 * kMiB) << "the page is whole at 26: no stitching, no growth";
    EXPECT_EQ(reserved(alloc), before + std::int64_t(2 * kMiB));
    if (host) {
      fills = {{l.c, 3 * kMiB, 0xC3}, {l.d, 7 * kMiB, 0xD4}, {f, 6 * kMiB, 0xF6}};
      testing_fills::expect_intact(fills);
      fills.push_back({h, 4 * kMiB, 0x4B});
      testing_fills::fill(fills.back());
      testing_fills::expect_intact(fills);
    }
    alloc.check_invariants();
    for (void* p : {l.c, l.d, f, h}) alloc.deallocate(p, 0);
    alloc.empty_cache();
    EXPECT_EQ(reserved(alloc), 0) << (host ? "host" : "sim");
  }
}

}  // namespace
}  // namespace gpumem
