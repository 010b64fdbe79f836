// PyTorch's graph-pool hooks called the way PyTorch calls them: through function pointers of its exact C++
// types (a MempoolId_t pair by value, a std::function filter by value), plus the ctypes entry points the
// shim uses for MemPool and CUDA graph trees. Host backend: real memory, so data checks are real.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "api/torch_hooks.hpp"
#include "gpumem/gpumem.h"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"

struct CUstream_st;

namespace {
// The types torch/csrc/cuda/CUDAPluggableAllocator.h declares, spelled as PyTorch spells them.
using cudaStream_t = CUstream_st*;
using MempoolId_t = std::pair<unsigned long long, unsigned long long>;
using BeginFn = void(int, MempoolId_t, std::function<bool(cudaStream_t)>);
using EndFn = void(int, MempoolId_t);

cudaStream_t stream(std::uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

class PoolHooks : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpumem::set_backend_factory([](int) {
      gpumem::HostBackendOptions o;
      o.capacity = std::size_t(1) << 30;
      return std::make_shared<gpumem::HostBackend>(o);
    });
  }
  // What PyTorch's set_*_pool bindings do with the integer address ctypes gives them.
  template <typename Fn>
  static std::function<Fn> from_address(void (*symbol)(int, gpumem::api::TorchPoolId, gpumem::api::TorchStreamFilter)) {
    return reinterpret_cast<Fn*>(reinterpret_cast<std::uint64_t>(symbol));
  }
  template <typename Fn>
  static std::function<Fn> from_address(void (*symbol)(int, gpumem::api::TorchPoolId)) {
    return reinterpret_cast<Fn*>(reinterpret_cast<std::uint64_t>(symbol));
  }
  std::function<BeginFn> begin = from_address<BeginFn>(&gpumem_begin_allocate_to_pool);
  std::function<EndFn> end = from_address<EndFn>(&gpumem_end_allocate_to_pool);
  std::function<EndFn> release = from_address<EndFn>(&gpumem_release_pool);
};

TEST_F(PoolHooks, CaptureThroughTorchTypesKeepsGraphMemoryApart) {
  const MempoolId_t pool{0, 41};
  std::uintptr_t capture_stream = 0x7000;
  begin(0, pool, [&](cudaStream_t s) { return s == stream(capture_stream); });
  void* graph_tmp = gpumem_malloc(1 << 20, 0, stream(capture_stream));
  void* outside = gpumem_malloc(1 << 20, 0, nullptr);
  std::memset(graph_tmp, 0xAB, 1 << 20);
  gpumem_free(graph_tmp, 1 << 20, 0, stream(capture_stream));
  end(0, pool);
  EXPECT_EQ(gpumem_pool_use_count(0, pool.first, pool.second), 1);
  // The "replay" writes into the freed intermediate; nothing allocated afterwards may live there.
  std::vector<void*> others;
  for (int i = 0; i < 16; ++i) {
    void* p = gpumem_malloc(1 << 20, 0, i % 2 ? nullptr : stream(capture_stream));
    std::memset(p, i, 1 << 20);
    others.push_back(p);
  }
  std::memset(graph_tmp, 0xCD, 1 << 20);  // replay
  for (int i = 0; i < 16; ++i)
    EXPECT_EQ(static_cast<unsigned char*>(others[i])[12345], static_cast<unsigned char>(i)) << "tensor " << i;
  for (void* p : others) gpumem_free(p, 1 << 20, 0, nullptr);
  gpumem_free(outside, 1 << 20, 0, nullptr);
  release(0, pool);
  EXPECT_EQ(gpumem_pool_use_count(0, pool.first, pool.second), 0);
}

TEST_F(PoolHooks, ThreadFilterAndMemPoolCounts) {
  const MempoolId_t pool{3, 0};
  ASSERT_EQ(gpumem_pool_incref(0, pool.first, pool.second), GPUMEM_OK);  // torch.cuda.MemPool()
  std::thread::id me = std::this_thread::get_id();
  begin(0, pool, [me](cudaStream_t) { return std::this_thread::get_id() == me; });  // use_mem_pool
  void* mine = gpumem_malloc(4096, 0, nullptr);
  void* theirs = nullptr;
  std::thread([&] { theirs = gpumem_malloc(4096, 0, nullptr); }).join();
  end(0, pool);
  release(0, pool);
  uintptr_t live[4] = {};
  ASSERT_EQ(gpumem_pool_live_blocks(0, pool.first, pool.second, live, 4), 1);
  EXPECT_EQ(live[0], reinterpret_cast<uintptr_t>(mine));
  EXPECT_EQ(gpumem_pool_use_count(0, pool.first, pool.second), 1) << "the MemPool itself still holds it";
  gpumem_free(mine, 4096, 0, nullptr);
  gpumem_free(theirs, 4096, 0, nullptr);
  EXPECT_EQ(gpumem_pool_release(0, pool.first, pool.second), GPUMEM_OK);
}

TEST_F(PoolHooks, CheckpointRestoreAndBadHandles) {
  const MempoolId_t pool{0, 77};
  begin(0, pool, [](cudaStream_t s) { return s == stream(0x9000); });
  void* a = gpumem_malloc(2 << 20, 0, stream(0x9000));
  long cp = gpumem_pool_checkpoint(0, pool.first, pool.second);
  ASSERT_GT(cp, 0);
  gpumem_free(a, 2 << 20, 0, stream(0x9000));
  end(0, pool);
  uintptr_t made[2] = {};
  ASSERT_EQ(gpumem_pool_restore(cp, made, 2), 1);
  EXPECT_EQ(made[0], reinterpret_cast<uintptr_t>(a));
  EXPECT_EQ(gpumem_pool_checkpoint_free(cp), GPUMEM_OK);
  EXPECT_EQ(gpumem_pool_restore(cp, made, 2), GPUMEM_E_INVALID);
  EXPECT_NE(std::string(gpumem_last_error()).find("checkpoint"), std::string::npos);
  EXPECT_EQ(gpumem_pool_checkpoint_free(cp), GPUMEM_E_INVALID);
  int freed = gpumem_deallocate(a, 0, nullptr);
  EXPECT_EQ(freed, GPUMEM_OK);
  release(0, pool);
}

TEST_F(PoolHooks, BeginTwiceOnOnePoolThrowsLikeTorch) {
  const MempoolId_t pool{0, 99};
  begin(0, pool, [](cudaStream_t) { return false; });
  EXPECT_THROW(begin(0, pool, [](cudaStream_t) { return false; }), std::exception);
  end(0, pool);
  release(0, pool);
}

}  // namespace
