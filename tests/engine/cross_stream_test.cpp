// What holds across streams: free pages of one stream's pool are stitched into another's before the
// device is asked for more (after waiting for the lending stream), and peaks are exact over all streams.
#include <gtest/gtest.h>

#include <memory>

#include "gpumem/allocator.hpp"
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
  EXPECT_GT(backend->call_counts().syncs, syncs) << "the lending stream is waited for first";
  a.check_invariants();
  a.deallocate(main, 0);
  a.check_invariants();
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
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

}  // namespace
}  // namespace gpumem
