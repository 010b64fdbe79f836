// Large pages (Backend::large_page): growth for a request of at least eight large pages takes its bulk in
// large pages and the rest in granules; smaller growth takes granules. Memory splits, is lent (stitched)
// and is given back only in whole pages: the sim backend refuses any map that splits one.
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

TEST(LargePages, BigRequestsGrowInLargePagesTheRestInGranules) {
  auto backend = sim();
  Allocator a(backend);
  void* big = a.allocate(200 * kMiB, 0);  // 12 pages of 16 MiB + 4 granules
  EXPECT_EQ(backend->call_counts().driver_creates, 16u);
  EXPECT_EQ(backend->call_counts().driver_maps, 16u);
  EXPECT_EQ(backend->call_counts().access_sets, 1u);
  EXPECT_EQ(reserved(a), std::int64_t(200 * kMiB));
  void* mid = a.allocate(100 * kMiB, 0);  // under eight large pages: granules only
  EXPECT_EQ(backend->call_counts().driver_creates, 16u + 50u);
  a.deallocate(mid, 0);
  a.deallocate(big, 0);
  a.check_invariants();
}

// A 200 MiB chunk is 12 pages of 16 MiB, then 4 granules: the bytes of the pages under [at, at + bytes).
std::size_t pages_under(std::size_t at, std::size_t bytes) {
  auto page_start = [](std::size_t p) { return p < 192 * kMiB ? p / (16 * kMiB) * (16 * kMiB) : p / (2 * kMiB) * (2 * kMiB); };
  auto page_end = [](std::size_t p) { return p < 192 * kMiB ? (p / (16 * kMiB) + 1) * (16 * kMiB) : (p / (2 * kMiB) + 1) * (2 * kMiB); };
  return page_end(at + bytes - 1) - page_start(at);
}

// big (200 MiB) freed, then x (10 MiB) placed somewhere in its memory: returns x's offset in it.
std::size_t reuse_part(Allocator& a, void** x, void** pin) {
  void* big = a.allocate(200 * kMiB, 0);
  if (pin) *pin = a.allocate(4 * kMiB, 0);  // after big: the region cannot grow in place
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
  const std::size_t at = reuse_part(a, &x, nullptr);
  a.empty_cache();
  const std::size_t kept = pages_under(at, 10 * kMiB);
  EXPECT_EQ(reserved(a), std::int64_t(kept)) << "the pages under x stay, all the others go";
  EXPECT_EQ(backend->used_bytes(), kept);
  EXPECT_LT(kept, 32 * kMiB);
  a.check_invariants();
  a.deallocate(x, 0);
  a.empty_cache();
  EXPECT_EQ(backend->used_bytes(), 0u);
}

TEST(LargePages, StitchingLendsWholePagesOnly) {
  // 195 MiB fit in no free block once x sits in big's memory; what can be lent is big's pages not under
  // x, so the device needs exactly 204 MiB + what lending cannot cover (the free part of x's pages).
  auto run = [](std::size_t spare_bytes, bool share = false) {
    SimBackendOptions o;
    o.granularity = 2 * kMiB;
    o.large_page = 16 * kMiB;
    auto probe = std::make_shared<SimBackend>(o);
    Allocator p(probe);
    void* x = nullptr;
    void* pin = nullptr;
    const std::size_t lendable = 200 * kMiB - pages_under(reuse_part(p, &x, &pin), 10 * kMiB);
    o.capacity = 204 * kMiB + (196 * kMiB - lendable) - spare_bytes;
    AllocatorConfig config;
    config.share_part_pages = share;
    Allocator a(std::make_shared<SimBackend>(o), config);
    reuse_part(a, &x, &pin);
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
