// The CUDA backend's failure paths, which no GPU run reaches: a driver call that fails midway (the
// double's fake_cuda_fail_next) leaves no partial state behind, and the backend works on afterwards.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backends/cuda_driver.hpp"
#include "backends/fake_cuda/fake_cuda.hpp"
#include "gpumem/allocator.hpp"
#include "gpumem/cuda_backend.hpp"
#include "gpumem/errors.hpp"

namespace {

using namespace gpumem;
using gpumem::testing::fake_cuda_fail_next;
using gpumem::testing::fake_cuda_state;
using gpumem::testing::FakeCudaState;

constexpr std::size_t MiB = std::size_t(1) << 20;
constexpr int kInvalidValue = 1, kOutOfMemory = 2, kNotSupported = 801;

class CudaBackendFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(cuda_unavailable_reason(), "");
    before_ = fake_cuda_state();
    backend_ = make_cuda_backend(0);
  }
  void TearDown() override {
    backend_.reset();
    const FakeCudaState after = fake_cuda_state();
    EXPECT_EQ(after.handles, before_.handles);
    EXPECT_EQ(after.mappings, before_.mappings);
    EXPECT_EQ(after.ranges, before_.ranges);
    EXPECT_EQ(after.events, before_.events);
    EXPECT_EQ(after.errors, before_.errors) << "a call broke CUDA's rules";
  }
  FakeCudaState before_;
  std::shared_ptr<Backend> backend_;
};

TEST_F(CudaBackendFaults, AMapFailingMidwayUnmapsWhatTheRunMapped) {
  Backend& b = *backend_;
  const DevicePtr va = b.reserve(16 * MiB);
  const ChunkHandle c = b.create_chunk(10 * MiB);  // five pages, five cuMemMap
  fake_cuda_fail_next("cuMemMap", 2, kInvalidValue);
  EXPECT_THROW(b.map_run(va, {Backend::MapCall{10 * MiB, c, 0}}), BackendError);
  EXPECT_EQ(fake_cuda_state().mappings, before_.mappings);
  b.map_run(va, {Backend::MapCall{10 * MiB, c, 0}});  // and the same run maps now
  EXPECT_EQ(fake_cuda_state().mappings, before_.mappings + 5);
  b.unmap(va, 10 * MiB);
  b.release_chunk(c);
  b.release_range(va, 16 * MiB);
}

TEST_F(CudaBackendFaults, AccessRefusedUnmapsTheWholeRun) {
  Backend& b = *backend_;
  const DevicePtr va = b.reserve(8 * MiB);
  const ChunkHandle c = b.create_chunk(8 * MiB);
  fake_cuda_fail_next("cuMemSetAccess", 0, kInvalidValue);
  EXPECT_THROW(b.map(va, 8 * MiB, c, 0), BackendError);
  EXPECT_EQ(fake_cuda_state().mappings, before_.mappings);
  b.map(va, 8 * MiB, c, 0);
  b.unmap(va, 8 * MiB);
  b.release_chunk(c);
  b.release_range(va, 8 * MiB);
}

TEST_F(CudaBackendFaults, ADeviceFullMidwayThroughAChunkReleasesThePagesAlreadyMade) {
  Backend& b = *backend_;
  fake_cuda_fail_next("cuMemCreate", 3, kOutOfMemory);
  EXPECT_THROW(b.create_chunk(10 * MiB), OutOfMemoryError);
  EXPECT_EQ(fake_cuda_state().handles, before_.handles);
  EXPECT_TRUE(b.supports_sharing()) << "out of memory is no reason to give up exportable pages";
  b.release_chunk(b.create_chunk(10 * MiB));
}

TEST_F(CudaBackendFaults, ExportablePagesRefusedFallBackToPlainOnes) {
  // Some containers refuse memory exportable as file descriptors: pages are made without, and sharing
  // with other processes is off from then on, with a clear error.
  Backend& b = *backend_;
  ASSERT_TRUE(b.supports_sharing());
  fake_cuda_fail_next("cuMemCreate", 0, kNotSupported);
  const ChunkHandle c = b.create_chunk(4 * MiB);
  EXPECT_FALSE(b.supports_sharing());
  EXPECT_THROW(b.export_chunk(c), BackendError);
  b.release_chunk(c);
}

TEST_F(CudaBackendFaults, AReservationRefusedIsAnErrorAndTheNextOneWorks) {
  Backend& b = *backend_;
  fake_cuda_fail_next("cuMemAddressReserve", 0, kOutOfMemory);
  EXPECT_THROW(b.reserve(64 * MiB), Error);
  EXPECT_EQ(fake_cuda_state().ranges, before_.ranges);
  b.release_range(b.reserve(64 * MiB), 64 * MiB);
}

TEST_F(CudaBackendFaults, AnEventThatCannotBeRecordedGoesBackToThePool) {
  Backend& b = *backend_;
  b.release_event(b.record_event(0));  // one event made, back in the pool
  const std::size_t events = fake_cuda_state().events;
  fake_cuda_fail_next("cuEventRecord", 0, kInvalidValue);
  EXPECT_THROW(b.record_event(0), BackendError);
  const EventHandle e = b.record_event(0);  // the pooled event again, no new one
  EXPECT_TRUE(b.event_done(e));
  b.release_event(e);
  EXPECT_EQ(fake_cuda_state().events, events);
  fake_cuda_fail_next("cuEventCreate", 0, kOutOfMemory);
  const EventHandle first = b.record_event(0);  // from the pool: cuEventCreate is not called
  EXPECT_THROW(b.record_event(0), OutOfMemoryError);  // a second at once needs a new one
  b.release_event(first);
}

TEST_F(CudaBackendFaults, PlainAllocationRefusedIsOutOfMemory) {
  auto plain = make_cuda_backend(0, CudaMemoryMode::plain);
  fake_cuda_fail_next("cuMemAlloc", 0, kOutOfMemory);
  EXPECT_THROW(plain->allocate(4 * MiB), OutOfMemoryError);
  plain->free(plain->allocate(4 * MiB));
}

TEST_F(CudaBackendFaults, TheEngineSurvivesADriverCallFailingInAGrowth) {
  setenv("GPUMEM_MAP_AHEAD", "0", 1);  // every driver call on this thread: the failure lands in the growth
  std::shared_ptr<Backend> backend = make_cuda_backend(0);
  unsetenv("GPUMEM_MAP_AHEAD");
  Allocator a(backend);
  void* kept = a.allocate(3 * MiB);
  for (const char* call : {"cuMemMap", "cuMemSetAccess"}) {
    fake_cuda_fail_next(call, 0, kInvalidValue);
    EXPECT_THROW(a.allocate(48 * MiB), BackendError) << call;
    EXPECT_EQ(a.stats().allocated_bytes[kAggregatePool].current, std::int64_t(3 * MiB)) << call;
    void* p = a.allocate(48 * MiB);  // the same request succeeds once the driver does
    EXPECT_EQ(a.stats().allocated_bytes[kAggregatePool].current, std::int64_t(51 * MiB)) << call;
    a.deallocate(p);
    a.empty_cache();
  }
  // A refused cuMemCreate is taken for a driver that cannot export pages: plain ones serve the request.
  fake_cuda_fail_next("cuMemCreate", 0, kInvalidValue);
  void* p = a.allocate(48 * MiB);
  EXPECT_FALSE(backend->supports_sharing());
  a.deallocate(p);
  a.deallocate(kept);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes[kAggregatePool].current, 0);
}

}  // namespace
