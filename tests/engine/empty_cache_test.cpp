// empty_cache() gives back every physical page that holds no live byte (issue 7 item 4), not only whole
// mappings or chunks, on the sim and host backends: the seeds' two-tensor example, and a random property
// run on several streams where, after each empty_cache(), what stays reserved is exactly the pages under
// live blocks.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

struct Setup {
  const char* name;
  std::size_t page;
  bool host;
};

std::shared_ptr<Backend> make(const Setup& s) {
  if (s.host) {
    HostBackendOptions o;
    o.granularity = s.page;
    o.capacity = std::size_t(2) << 30;
    return std::make_shared<HostBackend>(o);
  }
  SimBackendOptions o;
  o.granularity = s.page;
  return std::make_shared<SimBackend>(o);
}

// What the device itself says it has handed out.
std::size_t device_used(Backend& b) {
  MemInfo m = b.mem_info();
  return m.total - m.free;
}

class EmptyCache : public ::testing::TestWithParam<Setup> {};

TEST_P(EmptyCache, TheSeedsTwoTensorExampleKeepsOnlyThePagesOfTheLiveOne) {
  const std::size_t g = GetParam().page;
  auto backend = make(GetParam());
  Allocator a(backend);
  const std::size_t n = 400'000'000;
  void* first = a.allocate(n, 0);
  void* second = a.allocate(n, 0);
  a.deallocate(first, 0);
  a.empty_cache();
  const std::size_t reserved = std::size_t(a.stats().reserved_bytes[kAggregatePool].current);
  EXPECT_LE(reserved, (n + g - 1) / g * g + g) << "live bytes rounded up to pages, plus one page";
  EXPECT_EQ(device_used(*backend), reserved) << "the pages went back to the device";
  a.check_invariants();
  // The freed pages come back when needed, and the live tensor was never moved.
  void* again = a.allocate(n, 0);
  EXPECT_EQ(a.block_size(second), a.block_size(again));
  a.deallocate(again, 0);
  a.deallocate(second, 0);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(device_used(*backend), 0u);
}

TEST_P(EmptyCache, AfterEachEmptyCacheOnlyPagesUnderLiveBlocksStayReserved) {
  const std::size_t g = GetParam().page;
  auto backend = make(GetParam());
  Allocator a(backend);
  std::mt19937_64 rng(7);
  struct Live {
    void* p;
    std::size_t bytes;
    StreamId stream;
  };
  std::vector<Live> live;
  std::size_t live_bytes = 0;
  const std::size_t budget = GetParam().host ? 600 * kMiB : 3000 * kMiB;
  for (int step = 0; step < 3000; ++step) {
    const StreamId stream = rng() % 3;
    // Sizes from 512 bytes to 48 MiB, log-uniform, multiples of 512 (no rounding beyond the request).
    std::size_t bytes = std::size_t(std::exp2(9 + double(rng() % 1000) / 1000.0 * 16.6)) / 512 * 512;
    while (!live.empty() && live_bytes + bytes > budget) {
      std::size_t i = rng() % live.size();
      a.deallocate(live[i].p, live[i].stream);
      live_bytes -= live[i].bytes;
      live[i] = live.back();
      live.pop_back();
    }
    live.push_back({a.allocate(bytes, stream), bytes, stream});
    live_bytes += bytes;
    if (step % 250 == 249) {
      a.empty_cache();
      // Physical pages, not addresses: a page whose part-pages two blocks share is mapped at both.
      const AllocatorSnapshot snap = a.snapshot();
      std::map<std::uintptr_t, const SnapshotMapping*> maps;
      for (const SnapshotMapping& m : snap.mappings) maps[m.va] = &m;
      std::set<std::pair<std::size_t, std::size_t>> pages;
      for (const Live& l : live) {
        auto at = reinterpret_cast<std::uintptr_t>(l.p);
        for (std::uintptr_t p = at / g; p <= (at + a.block_size(l.p) - 1) / g; ++p) {
          auto m = maps.upper_bound(p * g);
          ASSERT_NE(m, maps.begin()) << "a live page is not mapped";
          --m;
          ASSERT_LT(p * g, m->first + m->second->bytes) << "a live page is not mapped";
          pages.insert({m->second->chunk, (m->second->offset + (p * g - m->first)) / g});
        }
      }
      const std::size_t reserved = std::size_t(a.stats().reserved_bytes[kAggregatePool].current);
      EXPECT_EQ(reserved, pages.size() * g) << "step " << step;
      EXPECT_EQ(device_used(*backend), reserved) << "step " << step;
      a.check_invariants();
    }
  }
  for (const Live& l : live) a.deallocate(l.p, l.stream);
  a.empty_cache();
  EXPECT_EQ(device_used(*backend), 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, EmptyCache,
                         ::testing::Values(Setup{"sim_2MiB", 2 * kMiB, false}, Setup{"sim_16MiB", 16 * kMiB, false},
                                           Setup{"host_2MiB", 2 * kMiB, true}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gpumem
