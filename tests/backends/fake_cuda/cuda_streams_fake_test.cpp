// Stream order on the CUDA backend, against the driver double holding recorded work pending (as a
// kernel still running would): a block another stream may still use is not handed out again until that
// stream has passed its free, and empty_cache() waits for such blocks rather than dropping them.
#include <gtest/gtest.h>

#include "backends/fake_cuda/fake_cuda.hpp"
#include "gpumem/allocator.hpp"
#include "gpumem/cuda_backend.hpp"

namespace {

using namespace gpumem;
using gpumem::testing::fake_cuda_hold_work;
using gpumem::testing::fake_cuda_state;
using gpumem::testing::FakeCudaState;

constexpr std::size_t MiB = std::size_t(1) << 20;
constexpr StreamId kMain = 0, kSide = 0x51;  // the double never dereferences a stream

class FakeCudaStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuda_unavailable_reason(), "");
    before_ = fake_cuda_state();
    fake_cuda_hold_work(true);
  }
  void TearDown() override {
    fake_cuda_hold_work(false);
    const FakeCudaState after = fake_cuda_state();
    EXPECT_EQ(after.handles, before_.handles);
    EXPECT_EQ(after.mappings, before_.mappings);
    EXPECT_EQ(after.events, before_.events);
    EXPECT_EQ(after.errors, before_.errors);
  }
  FakeCudaState before_;
};

TEST_F(FakeCudaStreams, ABlockInUseOnAnotherStreamIsNotReusedBeforeThatStreamPasses) {
  std::shared_ptr<Backend> backend = make_cuda_backend(0);
  {
    Allocator a(backend);
    void* p = a.allocate(4 * MiB, kMain);
    a.record_stream(p, kSide);  // a kernel on the side stream still reads it
    a.deallocate(p, kMain);
    void* q = a.allocate(4 * MiB, kMain);
    EXPECT_NE(q, p) << "handed out again while the side stream may still read it";
    backend->synchronize_stream(kSide);
    void* r = a.allocate(4 * MiB, kMain);
    EXPECT_EQ(r, p) << "the side stream passed: its block is free again";
    a.deallocate(q, kMain);
    a.deallocate(r, kMain);
  }
}

TEST_F(FakeCudaStreams, EmptyCacheWaitsForBlocksStillInUseElsewhere) {
  std::shared_ptr<Backend> backend = make_cuda_backend(0);
  {
    Allocator a(backend);
    void* p = a.allocate(32 * MiB, kMain);
    a.record_stream(p, kSide);
    a.deallocate(p, kMain);
    EXPECT_GT(a.stats().reserved_bytes[kAggregatePool].current, 0);
    a.empty_cache();  // the side stream is waited for, then its memory goes back
    EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
  }
}

}  // namespace
