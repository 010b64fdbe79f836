// Stream order on the CUDA backend, against the driver double holding recorded work pending (as a
// kernel still running would): a block another stream may still use is not handed out again until that
// stream has passed its free, and empty_cache() waits for such blocks rather than dropping them.
#include <gtest/gtest.h>

#include "backends/fake_cuda/fake_cuda.hpp"
#include "gpumem/allocator.hpp"
#include "backends/cuda_driver.hpp"
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

// record_stream with another GPU's stream: CUDA records an event only on a stream of its own context, so
// the event is made in that stream's context. The block then waits for that stream: a synchronize of its
// own device (empty_cache) does not cover the other GPU's work.
TEST_F(FakeCudaStreams, AnotherGpusStreamIsWaitedForThroughItsOwnContext) {
  using namespace gpumem::cuda;
  using gpumem::testing::fake_cuda_entry;
  auto retain = fake_cuda_entry<CUresult(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  auto release = fake_cuda_entry<CUresult(CUdevice)>("cuDevicePrimaryCtxRelease_v2");
  auto get_current = fake_cuda_entry<CUresult(CUcontext*)>("cuCtxGetCurrent");
  auto set_current = fake_cuda_entry<CUresult(CUcontext)>("cuCtxSetCurrent");
  auto create = fake_cuda_entry<CUresult(CUstream*, unsigned)>("cuStreamCreate");
  auto destroy = fake_cuda_entry<CUresult(CUstream)>("cuStreamDestroy_v2");
  auto stream_sync = fake_cuda_entry<CUresult(CUstream)>("cuStreamSynchronize");
  CUcontext second = nullptr, previous = nullptr;
  ASSERT_EQ(retain(&second, 1), CUDA_SUCCESS);
  get_current(&previous);
  set_current(second);
  CUstream other = nullptr;
  ASSERT_EQ(create(&other, 0), CUDA_SUCCESS);
  set_current(previous);
  std::shared_ptr<Backend> backend = make_cuda_backend(0);
  {
    Allocator a(backend);
    void* p = a.allocate(4 * MiB, kMain);
    a.record_stream(p, reinterpret_cast<StreamId>(other));  // a kernel on GPU 1 still reads it
    a.deallocate(p, kMain);
    a.empty_cache();
    EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, std::int64_t(4 * MiB))
        << "given back while another GPU's stream may still read it";
    void* q = a.allocate(4 * MiB, kMain);
    EXPECT_NE(q, p);
    set_current(second);
    stream_sync(other);  // GPU 1's stream passed the free
    set_current(previous);
    void* r = a.allocate(4 * MiB, kMain);
    EXPECT_EQ(r, p) << "that stream passed: its block is free again";
    a.deallocate(q, kMain);
    a.deallocate(r, kMain);
  }
  set_current(second);
  destroy(other);
  set_current(previous);
  release(1);
}

}  // namespace
