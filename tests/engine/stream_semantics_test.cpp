// Stream ordering (sim backend, manual events): a block freed on its own stream is reusable at once;
// one used on other streams returns to the pool only after every one of them passed the free.
#include <gtest/gtest.h>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;
constexpr StreamId kMain = 0, kSide = 7, kThird = 9;

struct Fixture {
  std::shared_ptr<SimBackend> sim;
  Allocator alloc;
  static std::shared_ptr<SimBackend> make() {
    SimBackendOptions o;
    o.manual_events = true;
    return std::make_shared<SimBackend>(o);
  }
  Fixture() : sim(make()), alloc(sim) {}
  std::int64_t active() const { return alloc.stats().active_bytes[kAggregatePool].current; }
};

class StreamSemantics : public ::testing::TestWithParam<std::size_t> {};  // block size: small and large pool

TEST_P(StreamSemantics, FreedOnItsOwnStreamIsReusableAtOnce) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.deallocate(p, kMain);
  EXPECT_EQ(f.alloc.allocate(GetParam(), kMain), p);
  EXPECT_EQ(f.sim->pending_events(), 0u) << "a plain free recorded events";
}

TEST_P(StreamSemantics, RecordedStreamHoldsTheBlockUntilItPassesTheFree) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.record_stream(p, kSide);
  const std::int64_t held = f.active();
  f.alloc.deallocate(p, kMain);
  EXPECT_EQ(f.active(), held) << "a block in use on another stream stays active after its free";
  // Several allocations on the block's own stream: none may get p while kSide has not passed the free.
  std::vector<void*> others;
  for (int i = 0; i < 3; ++i) {
    void* q = f.alloc.allocate(GetParam(), kMain);
    EXPECT_NE(q, p) << "allocation " << i << " reused a block still in use on another stream";
    others.push_back(q);
  }
  EXPECT_GE(f.active(), held) << "the pending block stopped counting as active too early";
  f.sim->complete_stream(kSide);
  void* r = f.alloc.allocate(GetParam(), kMain);
  EXPECT_EQ(r, p) << "after the stream passed the free, the block is reusable";
  f.alloc.deallocate(r, kMain);
  for (void* q : others) f.alloc.deallocate(q, kMain);
  EXPECT_EQ(f.sim->pending_events(), 0u) << "events leaked";
  f.alloc.check_invariants();
}

TEST_P(StreamSemantics, EveryRecordedStreamMustPass) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.record_stream(p, kSide);
  f.alloc.record_stream(p, kThird);
  f.alloc.record_stream(p, kMain);  // its own stream: no extra wait
  f.alloc.deallocate(p, kMain);
  f.sim->complete_stream(kSide);
  void* q = f.alloc.allocate(GetParam(), kMain);
  EXPECT_NE(q, p) << "reused after only one of two streams passed the free";
  f.sim->complete_stream(kThird);
  void* r = f.alloc.allocate(GetParam(), kMain);
  EXPECT_EQ(r, p);
  f.alloc.deallocate(q, kMain);
  f.alloc.deallocate(r, kMain);
  EXPECT_EQ(f.sim->pending_events(), 0u);
}

TEST_P(StreamSemantics, WorkQueuedAfterTheFreeDoesNotDelayIt) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.record_stream(p, kSide);
  f.alloc.deallocate(p, kMain);
  f.sim->complete_stream(kSide);
  f.sim->record_event(kSide);  // more work on kSide after it passed the free
  void* r = f.alloc.allocate(GetParam(), kMain);
  EXPECT_EQ(r, p);
  f.alloc.deallocate(r, kMain);
}

TEST_P(StreamSemantics, FreeingOnAnotherStreamWaitsForThatStream) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.deallocate(p, kSide);  // freed from work queued on kSide
  void* q = f.alloc.allocate(GetParam(), kMain);
  EXPECT_NE(q, p);
  f.sim->complete_stream(kSide);
  void* r = f.alloc.allocate(GetParam(), kMain);
  EXPECT_EQ(r, p);
  f.alloc.deallocate(q, kMain);
  f.alloc.deallocate(r, kMain);
}

TEST_P(StreamSemantics, PendingBlocksSurviveManyAllocationsOnTheirStream) {
  // Regression: the pending list was compacted with a self-move that emptied a block's event list,
  // so the second allocation after the free returned the block although its stream was still busy.
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.record_stream(p, kSide);
  f.alloc.deallocate(p, kMain);
  std::vector<void*> live;
  for (int i = 0; i < 20; ++i) live.push_back(f.alloc.allocate(512, kMain));
  for (void* q : live) EXPECT_NE(q, p);
  EXPECT_GE(f.active(), std::int64_t(GetParam())) << "the pending block was returned early";
  for (void* q : live) f.alloc.deallocate(q, kMain);
  f.sim->complete_stream(kSide);
  f.alloc.empty_cache();
  EXPECT_EQ(f.sim->pending_events(), 0u) << "events leaked";
}

TEST_P(StreamSemantics, EmptyCacheWaitsForPendingBlocksAndReleasesThem) {
  Fixture f;
  void* p = f.alloc.allocate(GetParam(), kMain);
  f.alloc.record_stream(p, kSide);
  f.alloc.deallocate(p, kMain);
  f.alloc.empty_cache();  // synchronizes: the pending block is done and its memory goes back
  DeviceStats s = f.alloc.stats();
  EXPECT_EQ(s.active_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, 0);
  EXPECT_EQ(f.sim->used_bytes(), 0u);
  EXPECT_EQ(f.sim->pending_events(), 0u);
}

TEST_P(StreamSemantics, StreamsDoNotShareLiveBlocks) {
  Fixture f;
  void* a = f.alloc.allocate(GetParam(), kMain);
  void* b = f.alloc.allocate(GetParam(), kSide);
  EXPECT_NE(a, b);
  f.alloc.deallocate(a, kMain);
  void* c = f.alloc.allocate(GetParam(), kSide);
  EXPECT_NE(c, b);
  f.alloc.deallocate(b, kSide);
  f.alloc.deallocate(c, kSide);
  f.alloc.check_invariants();
}

INSTANTIATE_TEST_SUITE_P(Sizes, StreamSemantics, ::testing::Values(std::size_t(4096), 3 * kMiB),
                         [](const ::testing::TestParamInfo<std::size_t>& i) {
                           return i.param <= kSmallRequestLimit ? std::string("small") : std::string("large");
                         });

TEST(StreamSemanticsErrors, RecordStreamOnAnUnknownPointerThrows) {
  Fixture f;
  int local = 0;
  EXPECT_THROW(f.alloc.record_stream(&local, kSide), Error);
  void* p = f.alloc.allocate(1000, kMain);
  f.alloc.deallocate(p, kMain);
  EXPECT_THROW(f.alloc.record_stream(p, kSide), Error) << "record_stream on a freed block";
  f.alloc.check_invariants();
}

}  // namespace
}  // namespace gpumem
