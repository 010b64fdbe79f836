// The CUDA backend and the engine over it, against the CUDA driver test double (fake_cuda.hpp): every
// byte written comes back, pages made ahead of need are used and go back when growth stops, and when
// the allocator is gone the driver holds nothing (no page, mapping, range or event) and saw no call
// that breaks CUDA's rules. The double's own strictness is tested first: these tests can fail.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "backends/cuda_driver.hpp"
#include "backends/fake_cuda/fake_cuda.hpp"
#include "gpumem/allocator.hpp"
#include "gpumem/cuda_backend.hpp"

namespace {

using namespace gpumem;
using namespace gpumem::cuda;
using gpumem::testing::fake_cuda_state;
using gpumem::testing::FakeCudaState;

constexpr std::size_t MiB = std::size_t(1) << 20;

void expect_nothing_left(const FakeCudaState& before) {
  const FakeCudaState after = fake_cuda_state();
  EXPECT_EQ(after.handles, before.handles) << "physical pages left behind";
  EXPECT_EQ(after.mappings, before.mappings) << "mappings left behind";
  EXPECT_EQ(after.ranges, before.ranges) << "reserved ranges left behind";
  EXPECT_EQ(after.plain, before.plain);
  EXPECT_EQ(after.events, before.events) << "events left behind";
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.errors, before.errors) << "a driver call broke CUDA's rules";
}

TEST(FakeCuda, TheDoubleRefusesWhatCudaRefuses) {
  ASSERT_EQ(cuda_unavailable_reason(), "");
  const Driver& d = driver();
  const FakeCudaState before = fake_cuda_state();
  CUcontext ctx = nullptr;
  ASSERT_EQ(d.cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  CUdeviceptr va = 0;
  ASSERT_EQ(d.cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d.cuMemCreate(&h, 4 * MiB, &prop, 0), CUDA_SUCCESS);
  int refused = 0;
  auto refuses = [&](CUresult r) {
    ++refused;
    return r != CUDA_SUCCESS;
  };
  EXPECT_TRUE(refuses(d.cuMemMap(va, 2 * MiB, 2 * MiB, h, 0))) << "a nonzero offset";
  EXPECT_TRUE(refuses(d.cuMemMap(va, 2 * MiB, 0, h, 0))) << "part of an allocation";
  EXPECT_TRUE(refuses(d.cuMemMap(va + 6 * MiB, 4 * MiB, 0, h, 0))) << "past the reserved range";
  ASSERT_EQ(d.cuMemMap(va, 4 * MiB, 0, h, 0), CUDA_SUCCESS);
  EXPECT_TRUE(refuses(d.cuMemMap(va + 2 * MiB, 4 * MiB, 0, h, 0))) << "over a mapping";
  EXPECT_TRUE(refuses(d.cuMemUnmap(va, 2 * MiB))) << "half a mapping";
  char byte = 7;
  CUcontext previous = nullptr;
  d.cuCtxGetCurrent(&previous);
  d.cuCtxSetCurrent(nullptr);
  EXPECT_TRUE(refuses(d.cuMemcpyHtoD(va, &byte, 1))) << "no context";
  d.cuCtxSetCurrent(ctx);
  EXPECT_TRUE(refuses(d.cuMemcpyHtoD(va, &byte, 1))) << "no access granted";
  CUmemAccessDesc access{{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  EXPECT_TRUE(refuses(d.cuMemSetAccess(va, 8 * MiB, &access, 1))) << "over unmapped bytes";
  ASSERT_EQ(d.cuMemSetAccess(va, 4 * MiB, &access, 1), CUDA_SUCCESS);
  EXPECT_EQ(d.cuMemcpyHtoD(va + 3 * MiB, &byte, 1), CUDA_SUCCESS);
  char back = 0;
  EXPECT_EQ(d.cuMemcpyDtoH(&back, va + 3 * MiB, 1), CUDA_SUCCESS);
  EXPECT_EQ(back, 7);
  EXPECT_TRUE(refuses(d.cuMemAddressFree(va, 8 * MiB))) << "still mapped";
  ASSERT_EQ(d.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(fake_cuda_state().used_bytes, before.used_bytes + 4 * MiB) << "a released page lives while mapped";
  EXPECT_TRUE(refuses(d.cuMemRelease(h))) << "released twice";
  ASSERT_EQ(d.cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
  ASSERT_EQ(d.cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
  d.cuCtxSetCurrent(previous);
  d.cuDevicePrimaryCtxRelease(0);
  FakeCudaState expected = before;
  expected.errors += std::size_t(refused);
  expect_nothing_left(expected);
}

// A pattern per block at its first and last bytes (the whole block when small).
struct LiveBlock {
  void* p;
  std::size_t n;
  std::uint8_t seed;
};
std::vector<std::uint8_t> pattern(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::uint8_t(seed * 31 + i * 131 + (i >> 9));
  return v;
}
constexpr std::size_t kEdge = 64 << 10;
// The ranges checked: the whole block when small, else its first and last kEdge bytes.
std::vector<std::pair<std::size_t, std::size_t>> edges(std::size_t n) {
  if (n <= 2 * kEdge) return {{0, n}};
  return {{0, kEdge}, {n - kEdge, kEdge}};
}
void fill(Backend& b, const LiveBlock& x) {
  for (auto [at, len] : edges(x.n)) {
    auto bytes = pattern(len, std::uint8_t(x.seed + at));
    cuda_copy_to_device(b, DevicePtr(x.p) + at, bytes.data(), len);
  }
}
bool intact(Backend& b, const LiveBlock& x) {
  for (auto [at, len] : edges(x.n)) {
    std::vector<std::uint8_t> got(len);
    cuda_copy_to_host(b, got.data(), DevicePtr(x.p) + at, len);
    if (got != pattern(len, std::uint8_t(x.seed + at))) return false;
  }
  return true;
}

TEST(FakeCuda, EngineOnTheCudaBackendKeepsEveryByteAndLeavesNothingBehind) {
  const FakeCudaState before = fake_cuda_state();
  {
    std::shared_ptr<Backend> backend = make_cuda_backend(0);
    Allocator a(backend);
    std::mt19937 rng(11);
    std::vector<LiveBlock> live;
    std::size_t live_bytes = 0;
    auto drop = [&](std::size_t i) {
      EXPECT_TRUE(intact(*backend, live[i])) << "block of " << live[i].n << " bytes changed while live";
      a.deallocate(live[i].p);
      live_bytes -= live[i].n;
      live[i] = live.back();
      live.pop_back();
    };
    for (int op = 0; op < 1200; ++op) {
      if (!live.empty() && (rng() % 5 < 2 || live_bytes > 768 * MiB)) {
        drop(rng() % live.size());
        continue;
      }
      const unsigned kind = rng() % 20;
      const std::size_t n = kind < 10 ? 1 + rng() % MiB : kind < 18 ? MiB + rng() % (24 * MiB) : 24 * MiB + rng() % (96 * MiB);
      LiveBlock x{a.allocate(n), n, std::uint8_t(op)};
      fill(*backend, x);
      live.push_back(x);
      live_bytes += n;
      if (op % 400 == 399) a.empty_cache();  // stitching and release in the middle of the churn
    }
    while (!live.empty()) drop(live.size() - 1);
    a.empty_cache();
    const DeviceStats s = a.stats();
    EXPECT_GT(s.driver_map.calls, 0);
    EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, 0) << "empty_cache with nothing live keeps memory";
  }
  expect_nothing_left(before);
}

TEST(FakeCuda, PagesMadeAheadServeTheGrowthThenGoBackWhenIdle) {
  const FakeCudaState before = fake_cuda_state();
  {
    std::shared_ptr<Backend> backend = make_cuda_backend(0);
    Allocator a(backend);
    std::vector<LiveBlock> live;
    for (int i = 0; i < 96; ++i) {  // a program's first steps: growth after growth at the top
      const std::size_t n = 6 * MiB + std::size_t(i) * 4096;
      live.push_back({a.allocate(n), n, std::uint8_t(i)});
      fill(*backend, live.back());
    }
    DeviceStats s = a.stats();
    EXPECT_GT(s.ahead.calls, 0) << "no page was made ahead of need";
    for (const LiveBlock& x : live) EXPECT_TRUE(intact(*backend, x));
    // Growth stopped: the run asked for after the last growth is made, then goes back unused on the
    // worker once idle (2 s), so the driver holds what the allocator reports as reserved, and no more.
    // Counted, not watched: a loaded machine may make and give back the run between two looks.
    const std::int64_t unused_before = s.ahead_unused;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto settled = [&] {
      const DeviceStats now = a.stats();
      return now.ahead_held_bytes == 0 && now.ahead_unused > unused_before;
    };
    while (!settled() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = a.stats();
    EXPECT_GT(s.ahead_unused, unused_before) << "no run waited after the last growth";
    EXPECT_EQ(s.ahead_held_bytes, 0);
    EXPECT_EQ(fake_cuda_state().used_bytes - before.used_bytes, std::size_t(s.reserved_bytes[kAggregatePool].current));
    for (const LiveBlock& x : live) {
      EXPECT_TRUE(intact(*backend, x));
      a.deallocate(x.p);
    }
    a.empty_cache();
  }
  expect_nothing_left(before);
}

// Past 2 GiB reserved, growth for large requests comes in 16 MiB pages (one driver call each): they are
// mapped, split, lent and given back like granules.
TEST(FakeCuda, LargePagesPastTwoGiBKeepBytesAndGoBack) {
  const FakeCudaState before = fake_cuda_state();
  {
    std::shared_ptr<Backend> backend = make_cuda_backend(0);
    Allocator a(backend);
    std::vector<LiveBlock> live;
    for (int i = 0; i < 10; ++i) live.push_back({a.allocate(256 * MiB + 4096), 256 * MiB + 4096, std::uint8_t(i)});
    for (const LiveBlock& x : live) fill(*backend, x);
    const std::size_t pages_made = fake_cuda_state().creates - before.creates;
    EXPECT_LT(pages_made, std::size_t(2560 / 2)) << "no 16 MiB pages past 2 GiB";
    for (std::size_t i = 0; i < live.size(); i += 2) a.deallocate(live[i].p);
    for (int i = 0; i < 4; ++i) {  // 300 MiB each: stitched from the freed 256 MiB blocks' pages
      LiveBlock x{a.allocate(300 * MiB), 300 * MiB, std::uint8_t(50 + i)};
      fill(*backend, x);
      live.push_back(x);
    }
    for (std::size_t i = 1; i < live.size(); ++i) {
      if (i < 10 && i % 2 == 0) continue;  // freed above
      EXPECT_TRUE(intact(*backend, live[i])) << i;
      a.deallocate(live[i].p);
    }
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  }
  expect_nothing_left(before);
}

// Threads on streams of their own, a reader of memory_stats() and empty_cache() from another thread, all
// on the CUDA backend with its worker making pages ahead (the TSan build runs this too).
TEST(FakeCuda, ThreadsStreamsStatsAndEmptyCacheTogether) {
  const FakeCudaState before = fake_cuda_state();
  {
    std::shared_ptr<Backend> backend = make_cuda_backend(0);
    Allocator a(backend);
    std::atomic<bool> stop{false};
    std::thread reader([&] {
      for (int i = 0; !stop; ++i) {
        const DeviceStats s = a.stats();
        EXPECT_GE(s.reserved_bytes[kAggregatePool].current, s.allocated_bytes[kAggregatePool].current);
        if (i % 50 == 49) a.empty_cache();
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < 4; ++t)
      workers.emplace_back([&, t] {
        std::mt19937 rng(100 + t);
        const StreamId stream = StreamId(t + 1);
        std::vector<LiveBlock> live;
        for (int op = 0; op < 400; ++op) {
          if (!live.empty() && rng() % 2) {
            const std::size_t i = rng() % live.size();
            EXPECT_TRUE(intact(*backend, live[i]));
            a.deallocate(live[i].p, stream);
            live[i] = live.back();
            live.pop_back();
            continue;
          }
          const std::size_t n = 1 + rng() % (rng() % 4 ? MiB : 12 * MiB);
          live.push_back({a.allocate(n, stream), n, std::uint8_t(op + t)});
          fill(*backend, live.back());
        }
        for (const LiveBlock& x : live) a.deallocate(x.p, stream);
      });
    for (auto& w : workers) w.join();
    stop = true;
    reader.join();
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  }
  expect_nothing_left(before);
}

// Another process's memory on the device: pages made straight through the driver until `leave` bytes
// are free.
struct Squatter {
  std::vector<CUmemGenericAllocationHandle> pages;
  explicit Squatter(std::size_t leave) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
    const char* mib = std::getenv("GPUMEM_FAKE_CUDA_MIB");
    const std::size_t capacity = (mib ? std::size_t(std::atoll(mib)) : 8192) * MiB;
    while (capacity - fake_cuda_state().used_bytes > leave) {
      CUmemGenericAllocationHandle h = 0;
      if (driver().cuMemCreate(&h, 2 * MiB, &prop, 0) != CUDA_SUCCESS) break;
      pages.push_back(h);
    }
  }
  ~Squatter() {
    for (auto h : pages) driver().cuMemRelease(h);
  }
};

// On the stream that grew, the request takes the pages made ahead where they wait; on another stream
// (another arena, elsewhere) they are given back so that its own pages can be made.
class FakeCudaFull : public ::testing::TestWithParam<StreamId> {};

TEST_P(FakeCudaFull, TakesBackThePagesMadeAheadBeforeAnAllocationFails) {
  const FakeCudaState before = fake_cuda_state();
  {
    std::shared_ptr<Backend> backend = make_cuda_backend(0);
    Allocator a(backend);
    std::vector<void*> live;
    for (int i = 0; i < 64; ++i) live.push_back(a.allocate(6 * MiB + std::size_t(i) * 4096));
    std::int64_t held = 0;  // the worker makes the next run after the last growth: wait for it
    for (int i = 0; i < 200 && !(held = a.stats().ahead_held_bytes); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ASSERT_GT(held, 0) << "no page made ahead to take back";
    {
      Squatter other(8 * MiB);  // the device is full but for 8 MiB and the pages made ahead
      const std::size_t n = 8 * MiB + std::size_t(held) - 2 * MiB;  // fits only with those pages
      void* p = nullptr;
      EXPECT_NO_THROW(p = a.allocate(n, GetParam())) << held;
      if (p) {
        LiveBlock x{p, n, 9};
        fill(*backend, x);
        EXPECT_TRUE(intact(*backend, x));
        a.deallocate(p, GetParam());
      }
      try {
        a.allocate(512 * MiB, GetParam());
        ADD_FAILURE() << "512 MiB fitted on a full device";
      } catch (const OutOfMemoryError& e) {
        EXPECT_EQ(e.state().requested, 512 * MiB);
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
      }
    }
    for (void* p : live) a.deallocate(p);
    a.empty_cache();
  }
  expect_nothing_left(before);
}

INSTANTIATE_TEST_SUITE_P(Streams, FakeCudaFull, ::testing::Values(StreamId(0), StreamId(1)));

}  // namespace
