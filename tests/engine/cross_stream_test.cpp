// What holds across streams: free pages of one stream's pool are stitched into another's before the
// device is asked for more (after waiting for the lending stream), a growth that fails never hands its
// stream's freed pages to another stream unwaited, and peaks are exact over all streams.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "gpumem/allocator.hpp"
#include "gpumem/fault_injection_backend.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::shared_ptr<SimBackend> sim(std::size_t page = 2 * kMiB) {
  SimBackendOptions o;
  o.capacity = std::size_t(8) << 30;
  o.granularity = page;
  return std::make_shared<SimBackend>(o);
}

TEST(CrossStream, FreePagesOfAnotherStreamAreStitchedBeforeGrowing) {
  auto backend = sim();
  Allocator a(backend);
  void* side = a.allocate(200 * kMiB, 7);
  a.deallocate(side, 7);
  const std::int64_t reserved = a.stats().reserved_bytes[kAggregatePool].current;
  const std::uint64_t syncs = backend->call_counts().syncs;
  void* main = a.allocate(200 * kMiB, 0);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, reserved) << "stream 7's free pages were reused";
  EXPECT_EQ(backend->call_counts().syncs, syncs) << "stream 7 is done (the sim's work completes at once): no wait";
  a.check_invariants();
  a.deallocate(main, 0);
  a.check_invariants();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  a.check_invariants();
}

// Manual events: a stream's work is done only when the test says so, or at once on an idle stream.
std::shared_ptr<HostBackend> manual_host() {
  HostBackendOptions o;
  o.capacity = 256 * kMiB;
  o.granularity = 2 * kMiB;
  o.manual_events = true;
  return std::make_shared<HostBackend>(o);
}

TEST(CrossStream, ABusyStreamIsWaitedForBeforeItsFreePagesAreLent) {
  constexpr StreamId kBusy = 0x100, kAsking = 0x300;
  auto host = manual_host();
  Allocator a(host);
  a.deallocate(a.allocate(64 * kMiB, kBusy), kBusy);  // work queued on kBusy may still read it
  const std::int64_t reserved = a.stats().reserved_bytes[kAggregatePool].current;
  const std::uint64_t syncs = host->call_counts().syncs;
  void* p = a.allocate(64 * kMiB, kAsking);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, reserved) << "kBusy's free pages were reused";
  EXPECT_GT(host->call_counts().syncs, syncs) << "only after waiting for kBusy";
  a.deallocate(p, kAsking);
  a.check_invariants();
}

// 16 threads serving on streams of their own: a growth took another stream's free pages after waiting for
// that stream in 7 of 10 growths, so one thread's allocation waited for another thread's kernels. The
// pages of streams already done are taken first, with no wait; busy streams are waited for only when
// those do not cover the growth.
TEST(CrossStream, IdleStreamsLendBeforeBusyOnesAreWaitedFor) {
  constexpr StreamId kBusy = 0x100, kIdle = 0x200, kAsking = 0x300;
  auto host = manual_host();
  Allocator a(host);
  char* busy = static_cast<char*>(a.allocate(64 * kMiB, kBusy));
  void* idle = a.allocate(64 * kMiB, kIdle);
  std::memset(busy, 0x5a, 64 * kMiB);  // what kBusy's queued work reads
  a.deallocate(busy, kBusy);
  a.deallocate(idle, kIdle);
  host->idle_stream(kIdle);
  const std::int64_t reserved = a.stats().reserved_bytes[kAggregatePool].current;
  const std::uint64_t syncs = host->call_counts().syncs;

  char* first = static_cast<char*>(a.allocate(64 * kMiB, kAsking));
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, reserved) << "kIdle's free pages were reused";
  EXPECT_EQ(host->call_counts().syncs, syncs) << "kIdle is done: nobody was waited for";
  std::memset(first, 0x11, 64 * kMiB);
  for (std::size_t i = 0; i < 64 * kMiB; i += 4096) ASSERT_EQ(busy[i], 0x5a) << "kBusy's freed memory untouched";
  a.check_invariants();

  void* second = a.allocate(64 * kMiB, kAsking);
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, reserved) << "then kBusy's, no new memory";
  EXPECT_GT(host->call_counts().syncs, syncs) << "after waiting for kBusy";
  a.deallocate(first, kAsking);
  a.deallocate(second, kAsking);
  a.check_invariants();
}

// Stream A frees X while its queued work still reads it (events complete only when told). A growth on A
// lends X's pages (same stream: no wait) and then fails; another stream may get those pages only after a
// wait for A. B got them at once: B's writes changed what A's work read (a limit hit during another
// thread's graph capture, or a driver error while mapping).
struct FreedWhileRead {
  static constexpr StreamId A = 0x100, B = 0x200;
  std::shared_ptr<HostBackend> host;
  char* x = nullptr;
  void* y = nullptr;
  std::uint64_t syncs_at_free = 0;
  FreedWhileRead() {
    HostBackendOptions o;
    o.capacity = 64 * kMiB;
    o.granularity = 2 * kMiB;
    o.manual_events = true;
    host = std::make_shared<HostBackend>(o);
  }
  void prepare(Allocator& a) {
    x = static_cast<char*>(a.allocate(4 * kMiB, A));
    y = a.allocate(2 * kMiB, A);  // keeps X off the top
    std::memset(x, 'A', 4 * kMiB);
    a.deallocate(x, A);
    syncs_at_free = host->call_counts().syncs;
  }
  // B takes 4 MiB (or is refused) and writes it: true unless that changed what A's work reads at X
  // without a wait since A freed X.
  bool b_waits_for_a(Allocator& a) {
    char* z = nullptr;
    try {
      z = static_cast<char*>(a.allocate(4 * kMiB, B));
    } catch (const OutOfMemoryError&) {
    }
    if (z) std::memset(z, 'B', 4 * kMiB);
    const bool intact = x[0] == 'A' && x[4 * kMiB - 1] == 'A';
    const bool waited = host->call_counts().syncs > syncs_at_free;
    if (z) a.deallocate(z, B);
    a.deallocate(y, A);
    a.check_invariants();
    return intact || waited;
  }
};

TEST(CrossStream, AGrowthFailingAtTheLimitDuringACaptureKeepsFreedPagesFromOtherStreams) {
  FreedWhileRead t;
  AllocatorConfig config;
  config.limit_bytes = 6 * kMiB;
  Allocator a(t.host, config);
  t.prepare(a);
  const StreamId capturing = 0x999;  // another thread captures a graph: no wait is allowed meanwhile
  a.begin_allocate_to_pool({1, 1}, [&](StreamId s) { return s == capturing; });
  EXPECT_THROW(a.allocate(8 * kMiB, FreedWhileRead::A), OutOfMemoryError);
  EXPECT_TRUE(t.b_waits_for_a(a)) << "stream B was handed X's pages while A's work still read them";
  a.end_allocate_to_pool({1, 1});
}

TEST(CrossStream, AGrowthFailingInTheDriverKeepsFreedPagesFromOtherStreams) {
  FreedWhileRead t;
  FaultInjectionOptions fo;
  fo.kind = FaultKind::backend_error;
  auto faulty = std::make_shared<FaultInjectionBackend>(t.host, fo);
  Allocator a(faulty);
  t.prepare(a);
  faulty->arm(2);  // the growth below: its chunk is made (1), mapping the run fails (2)
  EXPECT_ANY_THROW(a.allocate(6 * kMiB, FreedWhileRead::A));
  faulty->arm(0);
  EXPECT_TRUE(t.b_waits_for_a(a)) << "stream B was handed X's pages while A's work still read them";
}

// Pages made ahead of need are device memory beyond the reserved count: a limit set at what is reserved
// must leave the device at most that full.
TEST(CrossStream, ALimitGivesBackPagesMadeAhead) {
  SimBackendOptions o;
  o.capacity = std::size_t(4) << 30;
  o.map_ahead = true;
  auto backend = std::make_shared<SimBackend>(o);
  Allocator a(backend);
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(a.allocate((40 + 8 * i) * kMiB, 0));
  ASSERT_GT(backend->used_bytes(), std::size_t(a.stats().reserved_bytes[kAggregatePool].current)) << "nothing made ahead";
  a.set_limit(std::size_t(a.stats().reserved_bytes[kAggregatePool].current));
  EXPECT_LE(backend->used_bytes(), a.limit());
  for (void* p : blocks) a.deallocate(p, 0);
  a.check_invariants();
}

TEST(CrossStream, PeaksAreExactOverAllStreams) {
  Allocator a(sim());
  for (StreamId s : {StreamId(0), StreamId(11), StreamId(22)}) {
    void* p = a.allocate(100 * kMiB, s);
    a.deallocate(p, s);
  }
  DeviceStats st = a.stats();
  EXPECT_EQ(st.allocated_bytes[kAggregatePool].peak, std::int64_t(100 * kMiB));
  EXPECT_EQ(st.allocated_bytes[kLargePool].peak, std::int64_t(100 * kMiB));
  EXPECT_EQ(st.requested_bytes[kAggregatePool].peak, std::int64_t(100 * kMiB));
  EXPECT_EQ(st.active_bytes[kAggregatePool].peak, std::int64_t(100 * kMiB));
  EXPECT_EQ(st.allocation[kAggregatePool].peak, 1);
  EXPECT_EQ(st.active[kAggregatePool].peak, 1);
  EXPECT_EQ(st.reserved_bytes[kAggregatePool].peak, std::int64_t(100 * kMiB));

  // Two streams live at once: the peak is their sum; a reset starts from what is live.
  void* x = a.allocate(30 * kMiB, 0);
  void* y = a.allocate(50 * kMiB, 11);
  a.deallocate(x, 0);
  a.reset_peak_stats();
  EXPECT_EQ(a.stats().allocated_bytes[kAggregatePool].peak, std::int64_t(50 * kMiB));
  void* z = a.allocate(kMiB / 2, 22);
  st = a.stats();
  EXPECT_EQ(st.allocated_bytes[kAggregatePool].peak, std::int64_t(50 * kMiB + kMiB / 2));
  EXPECT_EQ(st.allocated_bytes[kSmallPool].peak, std::int64_t(kMiB / 2));
  EXPECT_EQ(st.allocated_bytes[kLargePool].peak, std::int64_t(50 * kMiB));
  EXPECT_EQ(st.allocation[kAggregatePool].current, 2);
  a.deallocate(y, 11);
  a.deallocate(z, 22);
  EXPECT_EQ(a.stats().allocated_bytes[kAggregatePool].current, 0);
  a.check_invariants();
}

// An out-of-memory names the largest free extent of the asking stream's pool: a larger one in another
// stream's pool (a part-page beside its live block: never lent) is not this request's, and said so.
TEST(CrossStream, OomNamesTheLargestFreeExtentOfTheAskingStreamsPool) {
  Allocator a(sim());
  void* x = a.allocate(3 * kMiB, 7);
  void* y = a.allocate(1 * kMiB + 1, 7);  // large pool, beside x: [3,4) MiB shares x's second page
  a.deallocate(x, 7);
  a.set_limit(std::size_t(a.stats().reserved_bytes[kAggregatePool].current));
  try {
    a.allocate(5 * kMiB / 2, 0);
    FAIL() << "no OOM";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.state().largest_free_here, 0u) << m;
    EXPECT_GE(e.state().largest_free, kMiB) << m;
    EXPECT_NE(m.find("largest free extent 0 bytes in its pool ("), std::string::npos) << m;
    EXPECT_NE(m.find(" in another stream's or a graph's pool)"), std::string::npos) << m;
  }
  a.check_invariants();
  a.deallocate(y, 7);
}

}  // namespace
}  // namespace gpumem
