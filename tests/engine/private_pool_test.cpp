// Private pools (CUDA graphs, MemPool) on the sim backend: what a captured graph relies on. A graph keeps
// using the addresses of the blocks it allocated during capture, freed or not, until its pool is
// released; nothing else may ever be handed those addresses meanwhile.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr StreamId kCapture = 7;
const PoolId kPool{0, 1};

std::shared_ptr<SimBackend> sim(std::size_t capacity = std::size_t(8) << 30, bool manual_events = false) {
  SimBackendOptions o;
  o.capacity = capacity;
  o.manual_events = manual_events;
  return std::make_shared<SimBackend>(o);
}

PoolFilter on_stream(StreamId s) {
  return [s](StreamId x) { return x == s; };
}

struct Range {
  DevicePtr begin, end;
  bool overlaps(const Range& o) const { return begin < o.end && o.begin < end; }
};

Range range_of(const Allocator& a, void* p) {
  auto b = reinterpret_cast<DevicePtr>(p);
  return {b, b + a.block_size(p)};
}

TEST(PrivatePool, CaptureRoutesOnlyTheFilteredStreams) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* in_pool = a.allocate(4 * kMiB, kCapture);
  void* outside = a.allocate(4 * kMiB, 0);
  a.end_allocate_to_pool(kPool);
  EXPECT_EQ(a.pool_live_blocks(kPool), std::vector<DevicePtr>{reinterpret_cast<DevicePtr>(in_pool)});
  EXPECT_EQ(a.pool_use_count(kPool), 1);
  void* after = a.allocate(4 * kMiB, kCapture);  // capture over: the stream's own pool again
  EXPECT_EQ(a.pool_live_blocks(kPool).size(), 1u);
  for (void* p : {in_pool, outside, after}) a.deallocate(p, 0);
  a.check_invariants();
}

TEST(PrivatePool, FreedGraphMemoryIsNeverHandedToOtherAllocations) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* tmp = a.allocate(64 * kMiB, kCapture);  // an intermediate: freed during capture, used by every replay
  void* small_tmp = a.allocate(4096, kCapture);
  Range graph_large = range_of(a, tmp), graph_small = range_of(a, small_tmp);
  a.deallocate(tmp, kCapture);
  a.deallocate(small_tmp, kCapture);
  a.end_allocate_to_pool(kPool);

  a.empty_cache();  // must not give the pool's memory back while its graph lives
  EXPECT_GE(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(64 * kMiB));
  std::vector<void*> others;
  for (std::size_t size : {4096ul, 1 * kMiB, 32 * kMiB, 64 * kMiB, 200 * kMiB, 512ul, 64 * kMiB}) {
    for (StreamId s : {StreamId(0), kCapture, StreamId(9)}) {
      void* p = a.allocate(size, s);
      Range r = range_of(a, p);
      EXPECT_FALSE(r.overlaps(graph_large)) << size << " on stream " << s;
      EXPECT_FALSE(r.overlaps(graph_small)) << size << " on stream " << s;
      others.push_back(p);
    }
  }
  for (void* p : others) a.deallocate(p, 0);
  a.check_invariants();
}

TEST(PrivatePool, ReleasedPoolGivesMemoryBackButOutputsOutliveTheGraph) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* out = a.allocate(16 * kMiB, kCapture);
  void* tmp = a.allocate(48 * kMiB, kCapture);
  a.deallocate(tmp, kCapture);
  a.end_allocate_to_pool(kPool);
  a.release_pool(kPool);  // the graph is deleted; its output is still held
  EXPECT_EQ(a.pool_use_count(kPool), 0);
  auto reserved = [&] { return a.stats().reserved_bytes[kAggregatePool].current; };
  EXPECT_GE(reserved(), std::int64_t(16 * kMiB));
  EXPECT_LT(reserved(), std::int64_t(64 * kMiB)) << "the free part goes back when the pool is released";
  a.deallocate(out, 0);
  a.empty_cache();
  EXPECT_EQ(reserved(), 0);
  a.check_invariants();
}

TEST(PrivatePool, SharedPoolLivesUntilEveryGraphIsReleased) {
  Allocator a(sim());
  for (int graph = 0; graph < 2; ++graph) {
    a.begin_allocate_to_pool(kPool, on_stream(kCapture));
    void* t = a.allocate(8 * kMiB, kCapture);
    a.deallocate(t, kCapture);
    a.end_allocate_to_pool(kPool);
  }
  EXPECT_EQ(a.pool_use_count(kPool), 2);
  a.release_pool(kPool);
  a.empty_cache();
  EXPECT_GE(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(8 * kMiB)) << "one graph still uses it";
  a.release_pool(kPool);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
}

TEST(PrivatePool, NoEventIsRecordedDuringCaptureAndReuseWaitsAfterIt) {
  auto backend = sim(std::size_t(8) << 30, true);
  Allocator a(backend);
  void* x = a.allocate(2 * kMiB, kCapture);
  a.record_stream(x, 3);  // used on stream 3 too
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  a.deallocate(x, kCapture);  // freed during the capture: no event may be recorded now
  EXPECT_EQ(backend->pending_events(), 0u);
  a.end_allocate_to_pool(kPool);
  void* y = a.allocate(2 * kMiB, kCapture);  // the event is recorded now, and has not completed
  EXPECT_NE(y, x);
  EXPECT_EQ(backend->pending_events(), 1u);
  backend->complete_stream(3);
  a.deallocate(y, kCapture);
  void* z = a.allocate(2 * kMiB, kCapture);
  void* w = a.allocate(2 * kMiB, kCapture);
  EXPECT_TRUE(z == x || w == x) << "reusable once stream 3 passed the free";
  a.deallocate(z, 0);
  a.deallocate(w, 0);
  a.check_invariants();
}

TEST(PrivatePool, CheckpointRestoreMakesTheLiveBlocksExactlyTheCheckpoints) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* p1 = a.allocate(3 * kMiB, kCapture);
  void* p2 = a.allocate(5 * kMiB, kCapture);
  void* p3 = a.allocate(1000, kCapture);
  PoolCheckpoint cp = a.checkpoint_pool(kPool);
  EXPECT_EQ(cp.blocks.size(), 3u);
  a.deallocate(p2, kCapture);  // the program moved on: p2 died, p4 was made
  void* p4 = a.allocate(7 * kMiB, kCapture);
  a.end_allocate_to_pool(kPool);
  std::vector<DevicePtr> made = a.restore_pool(cp);
  EXPECT_EQ(made, std::vector<DevicePtr>{reinterpret_cast<DevicePtr>(p2)});
  std::vector<DevicePtr> live = a.pool_live_blocks(kPool);
  std::sort(live.begin(), live.end());
  std::vector<DevicePtr> want{reinterpret_cast<DevicePtr>(p1), reinterpret_cast<DevicePtr>(p2),
                              reinterpret_cast<DevicePtr>(p3)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(live, want);
  (void)p4;  // freed by the restore (its address may now be p2's again)
  EXPECT_EQ(a.stats().allocation[kAggregatePool].current, 3) << "blocks the checkpoint does not hold are freed";
  a.check_invariants();
}

TEST(PrivatePool, CheckpointRestoreTakesBackABlockStillWaitingForAnotherStream) {
  // CUDA graph trees restore a checkpoint that holds a block the program freed meanwhile while another
  // stream still used it (record_stream): the restore waits for that stream and hands the block back.
  auto backend = sim(std::size_t(8) << 30, /*manual_events=*/true);
  Allocator a(backend);
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* kept = a.allocate(3 * kMiB, kCapture);
  void* used_elsewhere = a.allocate(128 * 1024, kCapture);
  a.end_allocate_to_pool(kPool);
  PoolCheckpoint cp = a.checkpoint_pool(kPool);
  a.record_stream(used_elsewhere, 3);
  a.deallocate(used_elsewhere, kCapture);  // pending until stream 3 passes the free
  EXPECT_EQ(backend->pending_events(), 1u);
  std::vector<DevicePtr> made = a.restore_pool(cp);
  EXPECT_EQ(made, std::vector<DevicePtr>{reinterpret_cast<DevicePtr>(used_elsewhere)});
  std::vector<DevicePtr> live = a.pool_live_blocks(kPool);
  std::sort(live.begin(), live.end());
  std::vector<DevicePtr> want{reinterpret_cast<DevicePtr>(kept), reinterpret_cast<DevicePtr>(used_elsewhere)};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(live, want);
  a.check_invariants();
}

TEST(PrivatePool, ARestoreThatCannotPlaceABlockSaysWhatLiesThere) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  void* p = a.allocate(4 * kMiB, kCapture);
  PoolCheckpoint cp = a.checkpoint_pool(kPool);
  cp.blocks.push_back({reinterpret_cast<DevicePtr>(p) + kMiB, kMiB, kMiB, kCapture});  // overlaps p
  try {
    a.restore_pool(cp);
    ADD_FAILURE() << "a checkpoint block over a live one was placed";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("is no longer free in the pool (there: a live block of 4.00 MiB at " +
                        std::to_string(reinterpret_cast<DevicePtr>(p))),
              std::string::npos)
        << what;
  }
  a.end_allocate_to_pool(kPool);
  a.deallocate(p, kCapture);
  a.check_invariants();
}

TEST(PrivatePool, BadPoolCallsAreRefusedOrHarmless) {
  Allocator a(sim());
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  EXPECT_THROW(a.begin_allocate_to_pool(kPool, on_stream(kCapture)), Error);
  EXPECT_THROW(a.begin_allocate_to_pool({0, 2}, nullptr), Error);
  a.end_allocate_to_pool(kPool);
  a.end_allocate_to_pool({9, 9});
  a.release_pool({9, 9});
  EXPECT_EQ(a.pool_use_count({9, 9}), 0);
  a.release_pool(kPool);
  a.release_pool(kPool);  // one release too many: ignored
  EXPECT_EQ(a.pool_use_count(kPool), 0);
}

TEST(PrivatePool, ManyShortLivedGraphsReuseTheirStreamPools) {
  Allocator a(sim());
  for (unsigned long long g = 1; g <= 3000; ++g) {
    a.begin_allocate_to_pool({0, g}, on_stream(kCapture));
    void* t = a.allocate(kMiB, kCapture);
    a.deallocate(t, kCapture);
    a.end_allocate_to_pool({0, g});
    a.release_pool({0, g});
  }
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  a.check_invariants();
}

TEST(PrivatePool, OutOfMemoryDuringCaptureSaysWhyTheCacheStayed) {
  Allocator a(sim(64 * kMiB));
  a.begin_allocate_to_pool(kPool, on_stream(kCapture));
  try {
    a.allocate(128 * kMiB, kCapture);
    FAIL() << "allocation larger than the device succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("capture"), std::string::npos) << e.what();
  }
  a.end_allocate_to_pool(kPool);
  EXPECT_NE(a.allocate(kMiB, 0), nullptr) << "the allocator goes on after it";
}

// torch.cuda.MemPool(use_on_oom=True): PyTorch's last resort before an out of memory is a free block of such
// a pool, on the allocating stream; the block then belongs to the pool. The pool never grows for it, a pool
// without the flag or a released one is never used, and a live block of the pool is never handed out.
TEST(PrivatePool, UseOnOomPoolServesAnAllocationThatWouldFail) {
  const PoolId plain{0, 2};
  Allocator a(sim(std::size_t(256) * kMiB));
  a.create_or_incref_pool(kPool);
  a.create_or_incref_pool(plain);
  EXPECT_THROW(a.set_pool_use_on_oom({0, 99}, true), Error) << "a pool not in use";
  a.set_pool_use_on_oom(kPool, true);
  auto fill = [&](PoolId pool, std::size_t bytes) {
    a.begin_allocate_to_pool(pool, [](StreamId) { return true; });
    void* p = a.allocate(bytes, 0);
    a.end_allocate_to_pool(pool);
    return p;
  };
  void* pooled = fill(kPool, 100 * kMiB);
  void* plain_block = fill(plain, 100 * kMiB);
  void* pooled_live = fill(kPool, 20 * kMiB);
  const Range pooled_range = range_of(a, pooled);
  a.deallocate(pooled, 0);
  a.deallocate(plain_block, 0);
  // 220 MiB reserved in the pools (20 live), 36 MiB of the device left: 90 MiB fits only in a freed block.
  EXPECT_THROW(a.allocate(120 * kMiB, 1), OutOfMemoryError) << "another stream's request takes nothing";
  void* got = a.allocate(90 * kMiB, 0);
  ASSERT_NE(got, nullptr);
  const Range got_range = range_of(a, got);
  EXPECT_TRUE(got_range.overlaps(pooled_range)) << "served from the use_on_oom pool's free block";
  EXPECT_FALSE(got_range.overlaps(range_of(a, pooled_live)));
  auto live = a.pool_live_blocks(kPool);
  EXPECT_NE(std::find(live.begin(), live.end(), reinterpret_cast<DevicePtr>(got)), live.end()) << "it belongs to the pool";
  EXPECT_THROW(a.allocate(150 * kMiB, 0), OutOfMemoryError) << "the pool is never grown for a fallback";
  a.deallocate(got, 0);
  a.release_pool(kPool);  // released: no fallback any more (PyTorch's ~MemPool)
  a.deallocate(pooled_live, 0);
  a.release_pool(plain);
  a.check_invariants();
}

TEST(PrivatePool, AReleasedPoolServesNoFallback) {
  Allocator a(sim(std::size_t(128) * kMiB));
  a.create_or_incref_pool(kPool);
  a.set_pool_use_on_oom(kPool, true);
  a.begin_allocate_to_pool(kPool, [](StreamId) { return true; });
  void* pooled = a.allocate(100 * kMiB, 0);
  a.end_allocate_to_pool(kPool);
  a.create_or_incref_pool(kPool);  // a second user keeps it alive
  a.release_pool(kPool);
  a.release_pool(kPool);  // the last user is gone: its free memory goes back, no fallback is left
  void* out = a.allocate(8 * kMiB, 0);
  a.deallocate(pooled, 0);  // a live block outlives its pool; freed now, it goes back to the device
  EXPECT_NO_THROW(a.deallocate(a.allocate(100 * kMiB, 0), 0));
  a.deallocate(out, 0);
  a.check_invariants();
}

}  // namespace
}  // namespace gpumem
