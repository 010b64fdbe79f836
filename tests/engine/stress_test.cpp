// 8 threads, one stream each, allocating and freeing at once on one allocator; blocks also travel
// between threads and get used on other streams, while a ninth thread reads stats and empties the cache.
// Label "tsan": the ThreadSanitizer build runs this. On the host backend each thread's blocks carry a
// pattern, so two threads handed overlapping memory shows up as lost data.
#include <atomic>
#include <mutex>
#include <random>
#include <semaphore>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine_model.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem::testing_model {
namespace {

constexpr int kThreads = 8;

struct Mailbox {  // blocks handed from one thread to the next, which frees them
  std::mutex mutex;
  std::vector<std::pair<void*, StreamId>> blocks;
};

struct StressResult {
  std::atomic<std::int64_t> allocations{0}, frees{0};
  std::mutex failure_mutex;
  std::string failure;
  void fail(const std::string& why) {
    std::lock_guard lock(failure_mutex);
    if (failure.empty()) failure = why;
  }
};

void stress(Allocator& alloc, std::size_t ops_per_thread, std::size_t max_bytes, bool patterns,
            std::size_t (*device_used)(Backend&)) {
  StressResult result;
  std::vector<Mailbox> mail(kThreads);
  Pattern pattern(patterns ? max_bytes : 0);
  std::atomic<bool> done{false};

  auto worker = [&](int t) {
    const StreamId stream = StreamId(t + 1);
    SizeGenerator sizes(max_bytes, 1000 + std::uint64_t(t));
    std::mt19937_64& rng = sizes.rng();
    struct Held {
      void* p;
      std::size_t size;
      std::uint64_t tag;
    };
    std::vector<Held> held;
    std::uint64_t next_tag = std::uint64_t(t) << 40;
    auto check = [&](const Held& h) {
      if (patterns && !pattern.matches(h.p, h.size, h.tag))
        result.fail("thread " + std::to_string(t) + ": a live block lost its data");
    };
    for (std::size_t i = 0; i < ops_per_thread; ++i) {
      const unsigned r = unsigned(rng() % 100);
      if (r < 52 || held.empty()) {
        const std::size_t bytes = sizes.next();
        void* p = nullptr;
        try {
          p = alloc.allocate(bytes, stream);
        } catch (const OutOfMemoryError&) {
          continue;
        }
        ++result.allocations;
        const std::size_t size = alloc.block_size(p);
        if (size < bytes) result.fail("block_size below the request");
        Held h{p, patterns ? size : 0, next_tag++};
        if (patterns) pattern.fill(p, h.size, h.tag);
        held.push_back(h);
      } else if (r < 92) {
        const std::size_t k = rng() % held.size();
        Held h = held[k];
        held[k] = held.back();
        held.pop_back();
        check(h);
        // Usually freed on its own stream, sometimes on a neighbour's (which then holds it a while).
        const StreamId on = rng() % 8 == 0 ? StreamId(rng() % kThreads + 1) : stream;
        if (alloc.try_deallocate(h.p, on) != FreeResult::ok) result.fail("a live block did not free");
        ++result.frees;
      } else if (r < 96) {
        alloc.record_stream(held[rng() % held.size()].p, StreamId(rng() % kThreads + 1));
      } else {
        // Hand a block to the next thread, and free what the previous one handed over.
        Held h = held.back();
        held.pop_back();
        check(h);
        {
          std::lock_guard lock(mail[(t + 1) % kThreads].mutex);
          mail[(t + 1) % kThreads].blocks.emplace_back(h.p, stream);
        }
        std::vector<std::pair<void*, StreamId>> mine;
        {
          std::lock_guard lock(mail[t].mutex);
          mine.swap(mail[t].blocks);
        }
        for (auto [p, s] : mine) {
          if (alloc.try_deallocate(p, rng() % 2 ? s : stream) != FreeResult::ok) result.fail("a handed-over block did not free");
          ++result.frees;
        }
      }
    }
    for (const Held& h : held) {
      check(h);
      alloc.deallocate(h.p, stream);
      ++result.frees;
    }
  };

  std::thread observer([&] {
    std::uint64_t n = 0;
    while (!done.load()) {
      DeviceStats s = alloc.stats();
      if (s.allocation[kAggregatePool].current < 0) result.fail("negative live count");
      if (++n % 16 == 0) alloc.empty_cache();
      if (n % 64 == 0) (void)alloc.memory_summary();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(worker, t);
  for (auto& w : workers) w.join();
  done = true;
  observer.join();
  for (Mailbox& m : mail)
    for (auto [p, s] : m.blocks) {
      alloc.deallocate(p, s);
      ++result.frees;
    }

  ASSERT_EQ(result.failure, "");
  EXPECT_GT(result.allocations.load(), std::int64_t(ops_per_thread) * kThreads / 4);
  EXPECT_EQ(result.allocations.load(), result.frees.load());
  alloc.empty_cache();
  EXPECT_NO_THROW(alloc.check_invariants());
  const DeviceStats s = alloc.stats();
  EXPECT_EQ(s.allocation[kAggregatePool].current, 0);
  EXPECT_EQ(s.allocation[kAggregatePool].allocated, result.allocations.load());
  EXPECT_EQ(s.allocation[kAggregatePool].freed, result.frees.load());
  EXPECT_EQ(s.active_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(s.requested_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(device_used(alloc.backend()), 0u);
  // The totals over all streams got every change the threads made (PoolStats::publish): after a reset,
  // two blocks on two streams peak at exactly their sum.
  alloc.reset_peak_stats();
  void* a = alloc.allocate(std::size_t(3) << 20, 1);
  void* b = alloc.allocate(std::size_t(5) << 20, 2);
  const std::int64_t both = std::int64_t(alloc.block_size(a) + alloc.block_size(b));
  alloc.deallocate(a, 1);
  alloc.deallocate(b, 2);
  const DeviceStats after = alloc.stats();
  EXPECT_EQ(after.allocated_bytes[kAggregatePool].peak, both);
  EXPECT_EQ(after.allocation[kAggregatePool].peak, 2);
  EXPECT_EQ(after.allocated_bytes[kAggregatePool].current, 0);
  alloc.empty_cache();
}

TEST(EngineStress, EightThreadsOnEightStreamsSim) {
  SimBackendOptions o;
  o.capacity = std::size_t(8) << 30;
  Allocator alloc(std::make_shared<SimBackend>(o));
  stress(alloc, 20000, std::size_t(16) << 20, false,
         [](Backend& b) { return static_cast<SimBackend&>(b).used_bytes(); });
}

TEST(EngineStress, EightThreadsOnEightStreamsHostData) {
  HostBackendOptions o;
  o.capacity = std::size_t(512) << 20;
  o.granularity = std::size_t(64) << 10;
  Allocator alloc(std::make_shared<HostBackend>(o));
  stress(alloc, 2500, std::size_t(1) << 20, true,
         [](Backend& b) { return static_cast<HostBackend&>(b).used_bytes(); });
}

// Peaks over threads are true peaks: at most kHeld blocks are live at any moment (a semaphore hands out
// that many turns), so no peak may exceed kHeld blocks, however the threads' operations interleave.
TEST(EngineStress, PeaksOverThreadsNeverExceedWhatWasLive) {
  constexpr int kHeld = 3;
  constexpr std::size_t kBlock = std::size_t(64) << 20;
  SimBackendOptions o;
  o.capacity = std::size_t(8) << 30;
  Allocator alloc(std::make_shared<SimBackend>(o));
  std::counting_semaphore<kThreads> turns(kHeld);
  auto worker = [&](int t) {
    for (int i = 0; i < 4000; ++i) {
      turns.acquire();
      const StreamId stream = StreamId(1 + (t + i) % 4);  // pools shared by threads, and threads by pools
      void* p = alloc.allocate(kBlock + std::size_t(t) * 512, stream);
      alloc.deallocate(p, stream);
      turns.release();
    }
  };
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) workers.emplace_back(worker, t);
  for (auto& w : workers) w.join();
  const DeviceStats s = alloc.stats();
  const std::int64_t most = kHeld * std::int64_t(kBlock + kThreads * 512);
  EXPECT_LE(s.allocated_bytes[kAggregatePool].peak, most);
  EXPECT_LE(s.requested_bytes[kAggregatePool].peak, most);
  EXPECT_LE(s.active_bytes[kAggregatePool].peak, most);
  EXPECT_LE(s.allocation[kAggregatePool].peak, kHeld);
  EXPECT_LE(s.allocated_bytes[kLargePool].peak, most);
  EXPECT_GE(s.allocation[kAggregatePool].peak, 1);
  EXPECT_EQ(s.allocated_bytes[kAggregatePool].current, 0);
}

}  // namespace
}  // namespace gpumem::testing_model
