// The engine seam: the event stream (gpumem/events.hpp) and Allocator::snapshot().
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::shared_ptr<SimBackend> sim(std::size_t capacity = std::size_t(8) << 30, bool vmm = true,
                                bool manual_events = false) {
  SimBackendOptions o;
  o.capacity = capacity;
  o.virtual_memory = vmm;
  o.manual_events = manual_events;
  return std::make_shared<SimBackend>(o);
}

struct Collector final : AllocatorObserver {
  std::mutex mutex;
  std::vector<MemoryEvent> events;
  std::vector<OutOfMemoryError::State> ooms;
  void on_event(const MemoryEvent& e) noexcept override {
    std::lock_guard lock(mutex);
    events.push_back(e);
    if (e.oom) ooms.push_back(*e.oom);
  }
  std::vector<EventKind> kinds(bool blocks_only = true) {
    std::vector<EventKind> out;
    for (const auto& e : events)
      if (!blocks_only || e.kind == EventKind::alloc || e.kind == EventKind::free_requested ||
          e.kind == EventKind::free_completed)
        out.push_back(e.kind);
    return out;
  }
};

TEST(EngineEvents, AllocAndFreeAreReportedWithSizesAndStreams) {
  Allocator a(sim());
  auto c = std::make_shared<Collector>();
  a.add_observer(c);
  a.add_observer(c);  // twice: still one delivery
  void* p = a.allocate(1000, 5);
  a.deallocate(p, 5);
  ASSERT_EQ(c->kinds(), (std::vector<EventKind>{EventKind::alloc, EventKind::free_requested, EventKind::free_completed}));
  const MemoryEvent& alloc = c->events[c->events.size() - 3];
  EXPECT_EQ(alloc.addr, DevicePtr(p));
  EXPECT_EQ(alloc.size, 1024u);
  EXPECT_EQ(alloc.requested, 1000u);
  EXPECT_EQ(alloc.stream, 5u);
  EXPECT_EQ(c->events.back().requested, 1000u);
  // The first allocation mapped memory: a segment_map precedes the alloc.
  EXPECT_EQ(c->events.front().kind, EventKind::segment_map);

  a.remove_observer(c.get());
  std::size_t before = c->events.size();
  a.deallocate(a.allocate(4096, 5), 5);
  EXPECT_EQ(c->events.size(), before) << "a removed observer hears nothing";
}

TEST(EngineEvents, FreeCompletedWaitsForOtherStreams) {
  auto backend = sim(std::size_t(8) << 30, true, true);
  Allocator a(backend);
  auto c = std::make_shared<Collector>();
  a.add_observer(c);
  void* p = a.allocate(4 * kMiB, 1);
  a.record_stream(p, 2);
  a.deallocate(p, 1);
  EXPECT_EQ(c->kinds(), (std::vector<EventKind>{EventKind::alloc, EventKind::free_requested}));
  AllocatorSnapshot snap = a.snapshot();
  bool pending = false;
  for (const auto& r : snap.regions)
    for (const auto& b : r.blocks) pending |= b.addr == DevicePtr(p) && b.state == SnapshotBlockState::pending_free;
  EXPECT_TRUE(pending) << "the snapshot shows the block waiting for stream 2";
  a.empty_cache();  // synchronizes: the pending block completes
  EXPECT_EQ(c->kinds().back(), EventKind::free_completed);
  EXPECT_EQ(c->kinds(false).back(), EventKind::give_back);
}

TEST(EngineEvents, SegmentsStitchGiveBackAndOomAreReported) {
  Allocator plain(sim(std::size_t(1) << 30, false));
  auto c = std::make_shared<Collector>();
  plain.add_observer(c);
  plain.deallocate(plain.allocate(3 * kMiB), 0);
  plain.empty_cache();
  EXPECT_EQ(c->kinds(false).front(), EventKind::segment_alloc);
  bool segment_free = false;
  for (const auto& e : c->events) segment_free |= e.kind == EventKind::segment_free;
  EXPECT_TRUE(segment_free);

  Allocator vmm(sim(64 * kMiB));
  auto v = std::make_shared<Collector>();
  vmm.add_observer(v);
  std::vector<void*> keep;
  for (int i = 0; i < 8; ++i) keep.push_back(vmm.allocate(6 * kMiB));
  for (int i = 0; i < 8; i += 2) vmm.deallocate(keep[i]);
  void* big = vmm.allocate(20 * kMiB);  // only stitched free pages can serve it
  bool stitched = false;
  for (const auto& e : v->events) stitched |= e.kind == EventKind::stitch;
  EXPECT_TRUE(stitched);
  EXPECT_THROW(vmm.allocate(512 * kMiB), OutOfMemoryError);
  ASSERT_EQ(v->ooms.size(), 1u);
  EXPECT_EQ(v->ooms[0].requested, 512 * kMiB);
  EXPECT_TRUE(v->ooms[0].cache_released);
  EXPECT_EQ(v->events.back().kind, EventKind::oom);
  vmm.deallocate(big);
}

TEST(EngineEvents, OomMessageBeginsLikePyTorchs) {
  Allocator a(sim(64 * kMiB));
  a.set_limit(32 * kMiB);
  try {
    a.allocate(48 * kMiB);
    FAIL() << "no OOM";
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind("CUDA out of memory. Tried to allocate 48.00 MiB. GPU 0 has a total capacity of 64.00 MiB of "
                      "which ", 0), 0u) << m;
    EXPECT_NE(m.find("with 32.00 MiB allowed; "), std::string::npos) << m;
    EXPECT_NE(m.find("largest free extent"), std::string::npos) << m;
    EXPECT_NE(m.find("giving back the cache"), std::string::npos) << m;
    EXPECT_EQ(e.state().limit, 32 * kMiB);
  }
  EXPECT_EQ(torch_format_size(1000), "1000 bytes");
}

// Under a limit on a roomy device the limit is what ran short, and the cause names no byte count of a
// growth that was undone before the message was written (it said "768 MiB reserved" beside "0 bytes").
TEST(EngineEvents, OomAtTheLimitBlamesTheLimitAndAgreesWithItself) {
  Allocator a(sim(std::size_t(8) << 30));
  a.set_limit(64 * kMiB);
  void* live = a.allocate(40 * kMiB);
  try {
    a.allocate(40 * kMiB);
    FAIL() << "no OOM";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("free pages and the room left under the limit together are less than the request"),
              std::string::npos) << m;
    EXPECT_EQ(m.find("the device's free memory"), std::string::npos) << m;
    EXPECT_NE(m.find("(the allocator's limit of 64.00 MiB would be crossed)"), std::string::npos) << m;
    EXPECT_EQ(m.find("reserved, "), std::string::npos) << "a figure of the undone growth: " << m;
  }
  a.deallocate(live);
  Allocator full(sim(64 * kMiB));
  try {
    full.allocate(80 * kMiB);
    FAIL() << "no OOM";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("the device's free memory together are less than the request"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(torch_format_size(std::size_t(1) << 50), "1048576.00 GiB");
}

TEST(EngineSnapshot, BlocksAndMappingsDescribeTheAllocator) {
  Allocator a(sim());
  void* small = a.allocate(1000, 0);
  void* large = a.allocate(5 * kMiB, 3);
  void* freed = a.allocate(7 * kMiB, 3);
  a.deallocate(freed, 3);
  AllocatorSnapshot s = a.snapshot();
  EXPECT_EQ(s.backend, "sim");
  EXPECT_EQ(s.allocated_bytes(), 1024 + 5 * kMiB);
  EXPECT_EQ(std::int64_t(s.allocated_bytes()), s.stats.allocated_bytes[kAggregatePool].current);
  std::size_t mapped = 0;
  for (const auto& m : s.mappings) mapped += m.bytes;
  EXPECT_EQ(mapped + s.free_physical, s.reserved);
  std::map<DevicePtr, SnapshotBlock> by_addr;
  for (const auto& r : s.regions) {
    DevicePtr at = r.base;
    for (const auto& b : r.blocks) {
      EXPECT_EQ(b.addr, at) << "blocks tile the region";
      at += b.size;
      by_addr[b.addr] = b;
    }
    EXPECT_EQ(at, r.base + r.mapped);
  }
  EXPECT_EQ(by_addr[DevicePtr(small)].requested, 1000u);
  EXPECT_EQ(by_addr[DevicePtr(large)].state, SnapshotBlockState::allocated);
  EXPECT_EQ(by_addr[DevicePtr(freed)].state, SnapshotBlockState::free);
  a.deallocate(small, 0);
  a.deallocate(large, 3);
}

// The block freed last waits unmerged for the next call; a snapshot shows it merged with its free
// neighbours (as PyTorch's never shows two free blocks side by side), and the largest free block agrees.
TEST(EngineSnapshot, NoTwoFreeBlocksSideBySide) {
  Allocator a(sim());
  void* p = a.allocate(100, 0);
  a.deallocate(p, 0);
  AllocatorSnapshot s = a.snapshot();
  std::size_t largest = 0;
  for (const auto& r : s.regions)
    for (std::size_t i = 0; i < r.blocks.size(); ++i) {
      if (r.blocks[i].state == SnapshotBlockState::free) largest = std::max(largest, r.blocks[i].size);
      if (i > 0) {
        EXPECT_FALSE(r.blocks[i].state == SnapshotBlockState::free && r.blocks[i - 1].state == SnapshotBlockState::free)
            << "free blocks side by side at " << r.blocks[i].addr;
      }
    }
  EXPECT_EQ(largest, a.largest_free_block());
}

TEST(EngineSnapshot, IsConsistentWhileThreadsAllocate) {
  Allocator a(sim());
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<void*> live;
      for (unsigned i = 0; !stop.load(); ++i) {
        live.push_back(a.allocate(((i * 7919u) % 64 + 1) * 4096, StreamId(t)));
        if (live.size() > 16) {
          a.deallocate(live.front(), StreamId(t));
          live.erase(live.begin());
        }
      }
      for (void* p : live) a.deallocate(p, StreamId(t));
    });
  for (int i = 0; i < 200; ++i) {
    AllocatorSnapshot s = a.snapshot();
    EXPECT_EQ(std::int64_t(s.allocated_bytes()), s.stats.allocated_bytes[kAggregatePool].current);
    if (HasFailure()) break;
  }
  stop = true;
  for (auto& t : threads) t.join();
  a.check_invariants();
}

}  // namespace
}  // namespace gpumem
