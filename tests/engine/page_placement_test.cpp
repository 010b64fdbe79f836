// Page placement in the large pool (Arena::start_in): a request of whole pages gets whole pages, even
// behind a block of an odd size, so that when it is freed every one of its pages can be stitched into
// another block or given back; other sizes stay packed. The pattern is llama_generate's at 2 MiB pages:
// weights of 5.5 MiB push every later block half a page off the boundaries, and each freed decode
// tensor used to leave a part-page at both ends that neither stitching nor empty_cache() could use.
#include <gtest/gtest.h>

#include <memory>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr std::size_t kPage = 2 * kMiB;

std::shared_ptr<SimBackend> sim(bool virtual_memory = true) {
  SimBackendOptions o;
  o.granularity = kPage;
  o.virtual_memory = virtual_memory;
  return std::make_shared<SimBackend>(o);
}

AllocatorConfig page_by_page() {
  AllocatorConfig c;
  c.min_chunk_bytes = kPage;  // grow by exactly what is missing: reserved bytes tell the pages used
  return c;
}

std::int64_t reserved(const Allocator& a) { return a.stats().reserved_bytes[kAggregatePool].current; }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(PagePlacement, AFreedWholePageBlockBehindAnOddSizedOneIsStitchedWhole) {
  Allocator a(sim(), page_by_page());
  void* weight = a.allocate(5 * kMiB + kMiB / 2, 0);  // lives throughout, ends mid-page
  void* first = a.allocate(8 * kMiB, 0);
  void* middle = a.allocate(8 * kMiB, 0);
  void* last = a.allocate(8 * kMiB, 0);
  for (void* p : {first, middle, last}) EXPECT_EQ(addr(p) % kPage, 0u) << "whole pages start on a page";
  a.deallocate(middle, 0);
  // 16 MiB more than is free anywhere: the top grows, stitching all four pages the middle block had.
  const std::int64_t before = reserved(a);
  void* big = a.allocate(16 * kMiB, 0);
  EXPECT_EQ(reserved(a) - before, std::int64_t(8 * kMiB)) << "packed, the freed block would lend 3 pages, not 4";
  a.check_invariants();
  for (void* p : {weight, first, last, big}) a.deallocate(p, 0);
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
}

TEST(PagePlacement, EmptyCacheGivesBackEveryPageOfAFreedWholePageBlock) {
  Allocator a(sim(), page_by_page());
  void* weight = a.allocate(5 * kMiB + kMiB / 2, 0);
  void* first = a.allocate(8 * kMiB, 0);
  void* middle = a.allocate(8 * kMiB, 0);
  void* last = a.allocate(8 * kMiB, 0);
  a.deallocate(middle, 0);
  a.empty_cache();
  // Pages under live blocks: 3 for the weight, 4 each for the other two; packed they would touch 12.
  EXPECT_EQ(reserved(a), std::int64_t(11 * kPage));
  a.check_invariants();
  for (void* p : {weight, first, last}) a.deallocate(p, 0);
}

TEST(PagePlacement, WholePagesGoAtTheEndOfAFreeRangeThatEndsOnAPage) {
  Allocator a(sim(), page_by_page());
  void* weight = a.allocate(5 * kMiB + kMiB / 2, 0);
  void* odd = a.allocate(8 * kMiB + kMiB / 2, 0);  // packed: ends on a page boundary
  void* pin = a.allocate(8 * kMiB, 0);
  a.deallocate(odd, 0);  // free: [5.5 MiB, 14 MiB), its end on a page
  const std::int64_t before = reserved(a);
  void* pages = a.allocate(4 * kMiB, 0);
  EXPECT_EQ(addr(pages) + 4 * kMiB, addr(pin)) << "at the end: the free rest stays one range";
  void* rest = a.allocate(4 * kMiB + kMiB / 2, 0);  // fits only in that one range
  EXPECT_EQ(reserved(a), before) << "nothing grew";
  a.check_invariants();
  for (void* p : {weight, pin, pages, rest}) a.deallocate(p, 0);
}

TEST(PagePlacement, OtherSizesStayPacked) {
  Allocator a(sim(), page_by_page());
  const std::size_t odd = 5 * kMiB + kMiB / 2;
  void* x = a.allocate(odd, 0);
  void* y = a.allocate(odd, 0);
  void* z = a.allocate(3 * kMiB, 0);  // not a whole number of pages
  EXPECT_EQ(addr(y), addr(x) + odd);
  EXPECT_EQ(addr(z), addr(y) + odd);
  EXPECT_EQ(reserved(a), std::int64_t(7 * kPage)) << "14 MiB of blocks on 7 pages: no gap";
  for (void* p : {x, y, z}) a.deallocate(p, 0);
  a.check_invariants();
}

TEST(PagePlacement, PlainSegmentsAreUnaffected) {
  Allocator a(sim(false));
  void* x = a.allocate(5 * kMiB + kMiB / 2, 0);
  void* y = a.allocate(8 * kMiB, 0);  // same 20 MiB segment, right behind x, as in PyTorch
  EXPECT_EQ(addr(y), addr(x) + 5 * kMiB + kMiB / 2);
  a.deallocate(x, 0);
  a.deallocate(y, 0);
  a.check_invariants();
}

}  // namespace
}  // namespace gpumem
