// Large pages (Backend::large_page): once 128 of them are reserved, growth for a request of at least eight
// large pages takes its bulk in large pages and the rest in granules; smaller growth takes granules, and
// so does everything before (a growth that crosses the mark: its part past it in large pages), and all
// growth above half the device's memory (at most what this allocator holds plus what is free) or half the
// limit, where memory may run short. Memory splits, is lent (stitched) and is given back only in whole
// pages: the sim backend refuses any map that splits one.
#include <gtest/gtest.h>

#include <memory>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::shared_ptr<SimBackend> sim() {
  SimBackendOptions o;
  o.granularity = 2 * kMiB;
  o.large_page = 16 * kMiB;
  return std::make_shared<SimBackend>(o);
}

std::int64_t reserved(const Allocator& a) { return a.stats().reserved_bytes[kAggregatePool].current; }

// Large pages start once 128 of them (2 GiB) are reserved: a block held for the whole test gets there,
// in granules, and leaves the rest of its region (its last granule ends on a large page) to the test.
constexpr std::size_t kBallast = 2048 * kMiB;
void* ballast(Allocator& a, SimBackend& backend) {
  void* p = a.allocate(kBallast, 0);
  EXPECT_EQ(backend.call_counts().driver_creates, kBallast / (2 * kMiB)) << "granules until then";
  return p;
}

TEST(LargePages, SmallFootprintsStayInGranules) {
  // A large page left partly used at the peak would cost a workload of this size 8% of its memory.
  auto backend = sim();
  Allocator a(backend);
  void* big = a.allocate(200 * kMiB, 0);
  EXPECT_EQ(backend->call_counts().driver_creates, 100u);
  EXPECT_EQ(reserved(a), std::int64_t(200 * kMiB));
  a.deallocate(big, 0);
  a.check_invariants();
}

TEST(LargePages, BigRequestsGrowInLargePagesTheRestInGranules) {
  auto backend = sim();
  Allocator a(backend);
  void* hold = ballast(a, *backend);
  const auto base = backend->call_counts();
  void* big = a.allocate(200 * kMiB, 0);  // 12 pages of 16 MiB + 4 granules
  EXPECT_EQ(backend->call_counts().driver_creates - base.driver_creates, 16u);
  EXPECT_EQ(backend->call_counts().driver_maps - base.driver_maps, 16u);
  EXPECT_EQ(backend->call_counts().access_sets - base.access_sets, 1u);
  EXPECT_EQ(reserved(a), std::int64_t(kBallast + 200 * kMiB));
  void* mid = a.allocate(100 * kMiB, 0);  // under eight large pages: granules only
  EXPECT_EQ(backend->call_counts().driver_creates - base.driver_creates, 16u + 50u);
  a.deallocate(mid, 0);
  a.deallocate(big, 0);
  a.deallocate(hold, 0);
  a.check_invariants();
}

TEST(LargePages, AFirstGrowthPastTheMarkTakesLargePagesBeyondIt) {
  // One first request of 8 GiB (a preallocated cache, a process holding memory for another): its first
  // 2 GiB in granules, the rest in large pages, 1,408 pages instead of 4,096 (~40 us of driver calls each
  // on an H100, to map and again to give back: a 48 GiB hold took over the 1 s a cooperative release waits).
  auto backend = sim();
  Allocator a(backend);
  void* big = a.allocate(8192 * kMiB, 0);
  EXPECT_EQ(backend->call_counts().driver_creates, 1024u + 384u);
  EXPECT_EQ(reserved(a), std::int64_t(8192 * kMiB));
  a.deallocate(big, 0);
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
  EXPECT_EQ(backend->call_counts().driver_releases, 1024u + 384u);
  a.check_invariants();
}

TEST(LargePages, NoneAboveHalfTheDeviceOrHalfTheLimit) {
  // Near the ceiling large pages left partly used would strand memory a request there needs; granules
  // cost as much driver time each, so only there.
  for (bool limited : {false, true}) {
    SimBackendOptions o;
    o.granularity = 2 * kMiB;
    o.large_page = 16 * kMiB;
    o.capacity = limited ? 64 * 1024 * kMiB : 5 * 1024 * kMiB;
    auto backend = std::make_shared<SimBackend>(o);
    Allocator a(backend);
    if (limited) a.set_limit(5 * 1024 * kMiB);
    void* hold = ballast(a, *backend);
    void* below = a.allocate(256 * kMiB, 0);  // 2 GiB to 2.25 GiB: under the half, large pages
    EXPECT_EQ(backend->call_counts().driver_creates, kBallast / (2 * kMiB) + 16) << limited;
    void* across = a.allocate(512 * kMiB, 0);  // 2.25 to 2.75 GiB: large pages up to 2.5 GiB only
    EXPECT_EQ(backend->call_counts().driver_creates, kBallast / (2 * kMiB) + 16 + 16 + 128) << limited;
    void* above = a.allocate(256 * kMiB, 0);  // granules only
    EXPECT_EQ(backend->call_counts().driver_creates, kBallast / (2 * kMiB) + 16 + 16 + 128 + 128) << limited;
    for (void* p : {above, across, below, hold}) a.deallocate(p, 0);
    a.check_invariants();
  }
}

TEST(LargePages, NoneAboveHalfOfWhatOtherProcessesLeave) {
  // A device another process mostly fills: the ceiling is what this allocator holds plus what is free
  // (5 GiB here, as on the 5 GiB device above), not the device's memory.
  SimBackendOptions o;
  o.granularity = 2 * kMiB;
  o.large_page = 16 * kMiB;
  o.capacity = 64 * 1024 * kMiB;
  auto backend = std::make_shared<SimBackend>(o);
  Allocator other(backend);  // the other process's allocator, on the same device
  void* held = other.allocate(59 * 1024 * kMiB, 0);
  Allocator a(backend);
  const std::size_t creates = backend->call_counts().driver_creates;
  auto made = [&] { return backend->call_counts().driver_creates - creates; };
  void* hold = a.allocate(kBallast, 0);
  EXPECT_EQ(made(), kBallast / (2 * kMiB));
  void* below = a.allocate(256 * kMiB, 0);  // 2 GiB to 2.25 GiB: under half of 5 GiB, large pages
  EXPECT_EQ(made(), kBallast / (2 * kMiB) + 16);
  void* across = a.allocate(512 * kMiB, 0);  // large pages up to 2.5 GiB only
  EXPECT_EQ(made(), kBallast / (2 * kMiB) + 16 + 16 + 128);
  void* above = a.allocate(256 * kMiB, 0);  // granules only
  EXPECT_EQ(made(), kBallast / (2 * kMiB) + 16 + 16 + 128 + 128);
  for (void* p : {above, across, below, hold}) a.deallocate(p, 0);
  a.check_invariants();
  other.deallocate(held, 0);
}

// A 200 MiB chunk is 12 pages of 16 MiB, then 4 granules: the bytes of the pages under [at, at + bytes).
std::size_t pages_under(std::size_t at, std::size_t bytes) {
  auto page_start = [](std::size_t p) { return p < 192 * kMiB ? p / (16 * kMiB) * (16 * kMiB) : p / (2 * kMiB) * (2 * kMiB); };
  auto page_end = [](std::size_t p) { return p < 192 * kMiB ? (p / (16 * kMiB) + 1) * (16 * kMiB) : (p / (2 * kMiB) + 1) * (2 * kMiB); };
  return page_end(at + bytes - 1) - page_start(at);
}

// big (200 MiB, after the ballast) freed, then x (10 MiB) placed somewhere in its memory: returns x's
// offset in it.
// `more`: bytes held after pin, so that big's large pages lie below half of a device that is then full.
std::size_t reuse_part(Allocator& a, SimBackend& backend, void** x, void** pin, std::size_t more = 0) {
  ballast(a, backend);  // held until the allocator goes
  void* big = a.allocate(200 * kMiB, 0);
  if (pin) *pin = a.allocate(4 * kMiB, 0);  // after big: the region cannot grow in place
  if (more) a.allocate(more, 0);            // held until the allocator goes
  a.deallocate(big, 0);
  *x = a.allocate(10 * kMiB, 0);
  const auto offset = static_cast<std::size_t>(static_cast<char*>(*x) - static_cast<char*>(big));
  EXPECT_LE(offset + 10 * kMiB, 200 * kMiB) << "x reuses big's memory";
  return offset;
}

TEST(LargePages, EmptyCacheGivesBackWholeLargePagesOnly) {
  auto backend = sim();
  Allocator a(backend);
  void* x = nullptr;
  const std::size_t at = reuse_part(a, *backend, &x, nullptr);
  a.empty_cache();
  const std::size_t kept = pages_under(at, 10 * kMiB);
  EXPECT_EQ(reserved(a), std::int64_t(kBallast + kept)) << "the pages under x stay, all the others go";
  EXPECT_EQ(backend->used_bytes(), kBallast + kept);
  EXPECT_LT(kept, 32 * kMiB);
  a.check_invariants();
  a.deallocate(x, 0);
  a.empty_cache();
  EXPECT_EQ(backend->used_bytes(), kBallast);
}

TEST(LargePages, StitchingLendsWholePagesOnly) {
  // 195 MiB fit in no free block once x sits in big's memory; what can be lent is big's pages not under
  // x, so the device needs exactly the ballast, 204 MiB, kMore and what lending cannot cover (the free
  // part of x's pages). kMore makes the device big enough that big's pages are large ones.
  constexpr std::size_t kMore = 2560 * kMiB;
  auto run = [](std::size_t spare_bytes, bool share = false) {
    SimBackendOptions o;
    o.granularity = 2 * kMiB;
    o.large_page = 16 * kMiB;
    auto probe = std::make_shared<SimBackend>(o);
    Allocator p(probe);
    void* x = nullptr;
    void* pin = nullptr;
    const std::size_t lendable = 200 * kMiB - pages_under(reuse_part(p, *probe, &x, &pin, kMore), 10 * kMiB);
    o.capacity = kBallast + 204 * kMiB + kMore + (196 * kMiB - lendable) - spare_bytes;
    AllocatorConfig config;
    config.share_part_pages = share;
    auto backend = std::make_shared<SimBackend>(o);
    Allocator a(backend, config);
    reuse_part(a, *backend, &x, &pin, kMore);
    try {
      a.allocate(195 * kMiB, 0);
    } catch (const OutOfMemoryError&) {
      a.check_invariants();
      return false;
    }
    a.check_invariants();
    return true;
  };
  EXPECT_TRUE(run(0));
  EXPECT_FALSE(run(2 * kMiB)) << "the free part of x's large page cannot be lent";
  EXPECT_TRUE(run(2 * kMiB, true)) << "it can be shared: mapped again, only its free bytes used there";
}

}  // namespace
}  // namespace gpumem
