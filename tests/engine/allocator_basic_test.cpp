// Basic behaviour of the engine on the sim backend: the lead's smoke tests. The property, stress and
// fault-injection suites live beside this file.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::shared_ptr<SimBackend> sim(std::size_t capacity = std::size_t(8) << 30) {
  SimBackendOptions o;
  o.capacity = capacity;
  return std::make_shared<SimBackend>(o);
}

TEST(AllocatorBasic, AllocateFreeReuseAndStats) {
  Allocator a(sim());
  void* p = a.allocate(1000, 0);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(a.block_size(p), 1024u);
  DeviceStats s = a.stats();
  EXPECT_EQ(s.allocated_bytes[kAggregatePool].current, 1024);
  EXPECT_EQ(s.requested_bytes[kAggregatePool].current, 1000);
  EXPECT_EQ(s.allocation[kSmallPool].current, 1);
  a.deallocate(p, 0);
  void* q = a.allocate(1000, 0);
  EXPECT_EQ(p, q) << "a freed block is reusable at once on its own stream";
  a.deallocate(q, 0);
  s = a.stats();
  EXPECT_EQ(s.allocated_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(s.allocated_bytes[kAggregatePool].peak, 1024);
  a.check_invariants();
}

TEST(AllocatorBasic, LargeBlocksAreBackedByChunksAndEmptyCacheReleasesThem) {
  Allocator a(sim());
  void* p = a.allocate(100 * kMiB, 0);
  DeviceStats s = a.stats();
  EXPECT_GE(s.reserved_bytes[kAggregatePool].current, std::int64_t(100 * kMiB));
  a.deallocate(p, 0);
  a.empty_cache();
  s = a.stats();
  EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, 0);
  a.check_invariants();
}

TEST(AllocatorBasic, FreePagesAreStitchedIntoANewLargeBlock) {
  AllocatorConfig c;
  c.min_chunk_bytes = 2 * kMiB;
  c.stitch_free_fraction = 1.0;  // always stitch before growing
  Allocator a(sim(), c);
  void* x = a.allocate(64 * kMiB, 0);
  void* pin = a.allocate(64 * kMiB, 0);
  a.deallocate(x, 0);
  // 64 MiB free below a live block: a 100 MiB request reuses those pages plus 36 MiB new ones.
  void* big = a.allocate(100 * kMiB, 0);
  DeviceStats s = a.stats();
  EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, std::int64_t(164 * kMiB));
  a.check_invariants();
  a.deallocate(big, 0);
  a.deallocate(pin, 0);
  a.check_invariants();
}

TEST(AllocatorBasic, WithMuchMemoryFreeItGrowsInsteadOfStitching) {
  AllocatorConfig c;
  c.min_chunk_bytes = 2 * kMiB;
  c.stitch_free_fraction = 0.25;  // grow while a quarter of the reserved memory is free (default: 1.0)
  auto backend = sim();
  Allocator a(backend, c);
  void* x = a.allocate(64 * kMiB, 0);
  void* pin = a.allocate(64 * kMiB, 0);
  a.deallocate(x, 0);
  // Half of what is reserved is free: fragmentation, cured for good by growing, without map calls
  // on old pages.
  const BackendCallCounts before = backend->call_counts();
  void* big = a.allocate(100 * kMiB, 0);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(228 * kMiB));
  EXPECT_EQ(backend->call_counts().map_bytes, before.map_bytes + 100 * kMiB) << "only the new pages are mapped";
  EXPECT_EQ(backend->call_counts().access_sets, before.access_sets + 1) << "one run, access granted once";
  a.deallocate(big, 0);
  a.deallocate(pin, 0);
  a.check_invariants();

  // Under a limit the same request stitches instead of crossing it.
  Allocator limited(sim(), c);
  limited.set_limit(200 * kMiB);
  x = limited.allocate(64 * kMiB, 0);
  pin = limited.allocate(64 * kMiB, 0);
  limited.deallocate(x, 0);
  big = limited.allocate(100 * kMiB, 0);
  EXPECT_EQ(limited.stats().reserved_bytes[kAggregatePool].current, std::int64_t(164 * kMiB));
  EXPECT_EQ(limited.stats().num_alloc_retries, 0);
  limited.check_invariants();
  limited.deallocate(big, 0);
  limited.deallocate(pin, 0);
}

TEST(AllocatorBasic, LimitIsEnforcedAfterReleasingTheCache) {
  Allocator a(sim());
  a.set_limit(64 * kMiB);
  void* p = a.allocate(40 * kMiB, 0);
  EXPECT_THROW(a.allocate(40 * kMiB, 0), OutOfMemoryError);
  a.deallocate(p, 0);
  void* q = a.allocate(60 * kMiB, 0);
  EXPECT_NE(q, nullptr);
  EXPECT_LE(a.stats().reserved_bytes[kAggregatePool].peak, std::int64_t(64 * kMiB) + std::int64_t(40 * kMiB));
  EXPECT_EQ(a.stats().num_ooms, 1);
  a.deallocate(q, 0);
  a.check_invariants();
}

TEST(AllocatorBasic, AtTheLimitARequestTakesFreeBytesOfTheOtherPool) {
  Allocator a(sim());
  a.set_limit(4 * kMiB);  // two granules: one for each pool
  void* large = a.allocate(1536 * 1024, 0);  // the large pool's page, 512 KiB of it free beside it
  std::vector<void*> smalls;
  for (int i = 0; i < 4; ++i) smalls.push_back(a.allocate(512 * 1024, 0));  // the small pool's page, full
  ASSERT_EQ(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(4 * kMiB));
  // No page is free anywhere and none may be made: the small request goes where the large pool keeps
  // 512 KiB beside a live block, instead of failing.
  void* extra = a.allocate(512 * 1024, 0);
  EXPECT_EQ(a.stats().allocation[kSmallPool].current, 5) << "counted by its size, as PyTorch counts";
  EXPECT_EQ(a.stats().inactive_split[kLargePool].current, 0) << "the large pool's free part-page is taken";
  EXPECT_EQ(a.stats().num_ooms, 0);
  a.check_invariants();
  // And a large request fits in the small pool's page when three of its blocks are freed.
  a.deallocate(extra, 0);
  for (int i = 0; i < 3; ++i) a.deallocate(smalls[i], 0);
  void* big = a.allocate(1200 * 1024, 0);
  EXPECT_EQ(a.stats().allocation[kLargePool].current, 2);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].peak, std::int64_t(4 * kMiB));
  EXPECT_THROW(a.allocate(1200 * 1024, 0), OutOfMemoryError) << "no room anywhere: still an out-of-memory";
  a.check_invariants();
  for (void* p : {big, smalls[3], large}) a.deallocate(p, 0);
  a.check_invariants();
  EXPECT_EQ(a.stats().allocated_bytes[kAggregatePool].current, 0);
}

TEST(AllocatorBasic, TheLastFreedBlockCountsAsFree) {
  // The block freed last waits uncoalesced for the next call (a fast path); it is free all the same.
  Allocator a(sim());
  void* keep = a.allocate(100 * kMiB, 0);
  void* last = a.allocate(50 * kMiB, 0);
  const std::size_t before = a.largest_free_block();
  a.deallocate(last, 0);
  EXPECT_GE(a.largest_free_block(), 50 * kMiB);
  EXPECT_GE(a.largest_free_block(), before + 50 * kMiB) << "merged with the free bytes after it";
  EXPECT_EQ(a.allocate(50 * kMiB, 0), last) << "reading it changes nothing";
  a.deallocate(last, 0);
  a.deallocate(keep, 0);
  a.check_invariants();
}

TEST(AllocatorBasic, SummaryHasPyTorchLayout) {
  Allocator a(sim());
  void* p = a.allocate(3 * kMiB, 0);
  std::string s = a.memory_summary();
  EXPECT_NE(s.find("| Allocated memory      |"), std::string::npos) << s;
  EXPECT_NE(s.find("|       from large pool |"), std::string::npos) << s;
  for (std::size_t start = 0, end; (end = s.find('\n', start)) != std::string::npos; start = end + 1)
    EXPECT_EQ(end - start, 77u) << s.substr(start, end - start);
  a.deallocate(p, 0);
}

TEST(AllocatorBasic, PlainBackendUsesSegments) {
  SimBackendOptions o;
  o.virtual_memory = false;
  Allocator a(std::make_shared<SimBackend>(o));
  void* p = a.allocate(kMiB + 1, 0);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(20 * kMiB));
  a.deallocate(p, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  a.check_invariants();
}

// A block freed on its own stream and taken back at once has its statistics settled lazily while only
// one pool exists (StreamPool::park_lazily); with a second stream's pool every change is made at once.
// The same random program on both, read at random points, must show the same figures everywhere.
TEST(AllocatorBasic, LazilyParkedBlocksShowTheSameStatisticsAsEagerOnes) {
  Allocator lazy(sim()), eager(sim());
  eager.deallocate(eager.allocate(kMiB, 1), 1);  // a second pool: statistics shared, changes made at once
  eager.empty_cache();
  for (Allocator* a : {&lazy, &eager}) a->reset_peak_stats(), a->reset_accumulated_stats();
  std::mt19937 rng(11);
  const std::size_t sizes[] = {1000, 4096, 700 * 1024, 3 * kMiB, 3 * kMiB + 100, 20 * kMiB};
  std::vector<void*> live_lazy, live_eager;
  int reads = 0, checks = 0;
  for (int step = 0; step < 4000; ++step) {
    const int op = int(rng() % 10);
    if (op < 5 || live_lazy.empty()) {  // allocate; often the size just freed
      const std::size_t bytes = sizes[rng() % std::size(sizes)];
      live_lazy.push_back(lazy.allocate(bytes, 0));
      live_eager.push_back(eager.allocate(bytes, 0));
    } else {
      const std::size_t i = rng() % live_lazy.size();
      const bool again = op == 9;  // free and take the same size back at once
      const std::size_t bytes = again ? lazy.block_size(live_lazy[i]) : 0;
      lazy.deallocate(live_lazy[i], 0);
      eager.deallocate(live_eager[i], 0);
      if (again) {
        live_lazy[i] = lazy.allocate(bytes - 100, 0);  // the same block, a different request
        live_eager[i] = eager.allocate(bytes - 100, 0);
      } else {
        live_lazy.erase(live_lazy.begin() + std::ptrdiff_t(i));
        live_eager.erase(live_eager.begin() + std::ptrdiff_t(i));
      }
    }
    if (rng() % 7 == 0) {
      lazy.check_invariants();  // counts a lazily parked block as still allocated, as its statistics do
      ++checks;
    }
    if (rng() % 5 != 0) continue;
    ++reads;
    const DeviceStats l = lazy.stats(), e = eager.stats();
    const StatArray DeviceStats::*each[] = {&DeviceStats::allocation,      &DeviceStats::active,
                                            &DeviceStats::inactive_split,  &DeviceStats::allocated_bytes,
                                            &DeviceStats::active_bytes,    &DeviceStats::inactive_split_bytes,
                                            &DeviceStats::requested_bytes};
    for (std::size_t k = 0; k < std::size(each); ++k)
      for (int pool = 0; pool < 3; ++pool) {
        const Stat& x = (l.*each[k])[pool];
        const Stat& y = (e.*each[k])[pool];
        ASSERT_EQ(x.current, y.current) << "statistic " << k << " pool " << pool << " step " << step;
        ASSERT_EQ(x.peak, y.peak) << "statistic " << k << " pool " << pool << " step " << step;
        ASSERT_EQ(x.allocated, y.allocated) << "statistic " << k << " pool " << pool << " step " << step;
        ASSERT_EQ(x.freed, y.freed) << "statistic " << k << " pool " << pool << " step " << step;
      }
  }
  EXPECT_GT(reads, 500);
  EXPECT_GT(checks, 400);
  for (void* p : live_lazy) lazy.deallocate(p, 0);
  for (void* p : live_eager) eager.deallocate(p, 0);
  EXPECT_EQ(lazy.stats().allocated_bytes[kAggregatePool].current, 0);
}

}  // namespace
}  // namespace gpumem
