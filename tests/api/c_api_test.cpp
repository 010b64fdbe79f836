// The C ABI and the default allocators, against the host backend (real memory: data written through a
// pointer is read back). One process-wide registry, so every test uses its own device index.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.h"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"

namespace {

class HostBackendEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    gpumem::set_backend_factory([](int) {
      gpumem::HostBackendOptions o;
      o.capacity = std::size_t(256) << 20;
      return std::make_shared<gpumem::HostBackend>(o);
    });
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new HostBackendEnvironment);

std::string last_error() { return gpumem_last_error(); }

TEST(CApi, AllocateWriteReadFree) {
  void* p = nullptr;
  ASSERT_EQ(gpumem_allocate(3 << 20, 1, nullptr, &p), GPUMEM_OK) << last_error();
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 3 << 20);
  EXPECT_EQ(static_cast<unsigned char*>(p)[(3 << 20) - 1], 0x5a);
  EXPECT_EQ(gpumem_memory_allocated(1), std::size_t(3) << 20);
  EXPECT_GE(gpumem_memory_reserved(1), std::size_t(3) << 20);
  EXPECT_EQ(gpumem_deallocate(p, 1, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_memory_allocated(1), 0u);
  EXPECT_EQ(gpumem_max_memory_allocated(1), std::size_t(3) << 20);
  EXPECT_EQ(gpumem_reset_peak_memory_stats(1), GPUMEM_OK);
  EXPECT_EQ(gpumem_max_memory_allocated(1), 0u);
  EXPECT_EQ(gpumem_empty_cache_checked(), GPUMEM_OK);
  EXPECT_EQ(gpumem_memory_reserved(1), 0u);
}

TEST(CApi, PluggableEntryPointsFollowPyTorchsSignatures) {
  void* (*malloc_fn)(ssize_t, int, void*) = &gpumem_malloc;
  void (*free_fn)(void*, size_t, int, void*) = &gpumem_free;
  void* p = malloc_fn(1000, 2, reinterpret_cast<void*>(7));
  ASSERT_NE(p, nullptr);
  size_t size = 0;
  EXPECT_EQ(gpumem_base_alloc(p, &size), p);
  EXPECT_EQ(size, 1024u);  // rounded to 512 bytes
  gpumem_record_stream(p, reinterpret_cast<void*>(9));
  free_fn(p, 1000, 2, reinterpret_cast<void*>(7));
  EXPECT_EQ(gpumem_memory_allocated(2), 0u);
  EXPECT_EQ(malloc_fn(0, 2, nullptr), nullptr);
  EXPECT_THROW(malloc_fn(-5, 2, nullptr), std::invalid_argument);
  gpumem_init(1);
  gpumem_reset();
}

TEST(CApi, OutOfMemoryIsAStatusWithASentence) {
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(gpumem_allocate(std::size_t(1) << 40, 3, nullptr, &p), GPUMEM_E_OOM);
  EXPECT_EQ(p, nullptr);
  EXPECT_NE(last_error().find("out of memory"), std::string::npos) << last_error();
  EXPECT_THROW(gpumem_malloc(ssize_t(1) << 40, 3, nullptr), std::exception);
  EXPECT_EQ(gpumem_allocate(1024, 3, nullptr, nullptr), GPUMEM_E_INVALID);
}

TEST(CApi, LimitsAreEnforcedAndValidated) {
  ASSERT_EQ(gpumem_set_limit(std::size_t(8) << 20, 4), GPUMEM_OK);
  void* p = nullptr;
  EXPECT_EQ(gpumem_allocate(std::size_t(6) << 20, 4, nullptr, &p), GPUMEM_OK) << last_error();
  void* q = nullptr;
  EXPECT_EQ(gpumem_allocate(std::size_t(6) << 20, 4, nullptr, &q), GPUMEM_E_OOM);
  EXPECT_EQ(gpumem_deallocate(p, 4, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_set_fraction(1.5, 4), GPUMEM_E_INVALID);
  EXPECT_FALSE(last_error().empty());
  EXPECT_EQ(gpumem_set_fraction(0.5, 4), GPUMEM_OK) << last_error();
  EXPECT_THROW(gpumem_set_memory_fraction(0.0, 4), std::exception);
}

TEST(CApi, BadFreesAreReportedAndHarmless) {
  void* p = nullptr;
  ASSERT_EQ(gpumem_allocate(4096, 5, nullptr, &p), GPUMEM_OK);
  int stack_value = 0;
  EXPECT_EQ(gpumem_deallocate(&stack_value, 5, nullptr), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_deallocate(p, 5, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_deallocate(p, 5, nullptr), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_deallocate(nullptr, 5, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_deallocate(p, 40, nullptr), GPUMEM_E_INVALID);  // a device that never allocated
  EXPECT_EQ(gpumem_record_stream_checked(&stack_value, nullptr), GPUMEM_E_INVALID);
  gpumem_free(&stack_value, 4, 41, nullptr);  // never crashes
  EXPECT_EQ(gpumem_memory_allocated(5), 0u);
}

// CUDA graph trees free a restored block with raw_delete under whatever device is current (no guard); PyTorch
// finds the block by its pointer on any device, so gpumem's owner takes it back.
TEST(CApi, AnotherDevicesBlockIsFreedByItsOwner) {
  void* on_seven = nullptr;
  void* on_eight = nullptr;
  ASSERT_EQ(gpumem_allocate(4096, 7, nullptr, &on_seven), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(8192, 8, nullptr, &on_eight), GPUMEM_OK);
  EXPECT_EQ(gpumem_deallocate(on_eight, 7, nullptr), GPUMEM_OK) << gpumem_last_error();
  EXPECT_EQ(gpumem_memory_allocated(8), 0u);
  EXPECT_EQ(gpumem_memory_allocated(7), 4096u);
  gpumem_free(on_seven, 4096, 8, nullptr);  // PyTorch's pluggable free, the wrong device passed
  EXPECT_EQ(gpumem_memory_allocated(7), 0u);
  EXPECT_EQ(gpumem_deallocate(on_seven, 8, nullptr), GPUMEM_E_INVALID) << "freed once only";
  auto invalid_frees = [](int device) {
    std::vector<char> buf(1 << 16);
    gpumem_memory_stats_json(device, buf.data(), buf.size());
    const std::string json(buf.data());
    const std::size_t at = json.find("\"gpumem.num_invalid_frees\":");
    return at == std::string::npos ? -1 : std::atoi(json.c_str() + at + 27);
  };
  const int before = invalid_frees(7);
  gpumem_free(on_seven, 4096, 7, nullptr);  // a double free through PyTorch's path is still reported
  EXPECT_EQ(invalid_frees(7), before + 1);
}

TEST(CApi, TextBuffersReportTheLengthTheyNeed) {
  void* p = nullptr;
  ASSERT_EQ(gpumem_allocate(1 << 20, 6, nullptr, &p), GPUMEM_OK);
  int needed = gpumem_memory_stats_json(6, nullptr, 0);
  ASSERT_GT(needed, 0);
  std::vector<char> small(10, 'x');
  EXPECT_EQ(gpumem_memory_stats_json(6, small.data(), small.size()), needed);
  EXPECT_EQ(small[9], '\0');
  std::vector<char> buf(std::size_t(needed) + 1);
  EXPECT_EQ(gpumem_memory_stats_json(6, buf.data(), buf.size()), needed);
  std::string json(buf.data());
  EXPECT_NE(json.find("\"allocated_bytes.all.current\":1048576"), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_device_alloc\""), std::string::npos);
  needed = gpumem_memory_summary(6, nullptr, 0);
  buf.assign(std::size_t(needed) + 1, 0);
  gpumem_memory_summary(6, buf.data(), buf.size());
  EXPECT_NE(std::string(buf.data()).find("Allocated memory"), std::string::npos);
  char name[16];
  EXPECT_EQ(gpumem_backend_name(6, name, sizeof name), 4);
  EXPECT_STREQ(name, "host");
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(gpumem_mem_get_info(6, &free_bytes, &total), GPUMEM_OK);
  EXPECT_EQ(total, std::size_t(256) << 20);
  EXPECT_EQ(gpumem_deallocate(p, 6, nullptr), GPUMEM_OK);
}

TEST(CApi, CurrentDeviceIsPerThread) {
  ASSERT_EQ(gpumem_set_current_device(7), GPUMEM_OK);
  void* p = nullptr;
  ASSERT_EQ(gpumem_allocate(512, -1, nullptr, &p), GPUMEM_OK);
  EXPECT_EQ(gpumem_memory_allocated(7), 512u);
  std::thread([] { EXPECT_EQ(gpumem::current_device(), 0); }).join();
  EXPECT_EQ(gpumem_deallocate(p, -1, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_set_current_device(-3), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_set_current_device(1000), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_set_current_device(0), GPUMEM_OK);
  // Only -1 means the current device: -2 is a mistake, not device 0.
  EXPECT_EQ(gpumem_allocate(512, -2, nullptr, &p), GPUMEM_E_INVALID);
  EXPECT_NE(std::string(gpumem_last_error()).find("-1 for the current device"), std::string::npos) << gpumem_last_error();
  EXPECT_EQ(gpumem_pool_incref(-3, 1, 2), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_memory_allocated(0), 0u);
}

TEST(DefaultAllocators, TorchNamedQueriesNeverStartABackend) {
  EXPECT_EQ(gpumem::memory_allocated(50), 0u);
  EXPECT_EQ(gpumem::max_memory_reserved(50), 0u);
  EXPECT_EQ(gpumem::memory_stats(50).at("allocated_bytes.all.current"), 0);
  gpumem::reset_peak_memory_stats(50);
  EXPECT_EQ(gpumem::memory_reserved(50), 0u);
  gpumem::default_allocator(51);
  EXPECT_THROW(gpumem::set_backend_factory(nullptr), gpumem::Error);  // too late: allocators exist
  EXPECT_THROW(gpumem::default_allocator(64), gpumem::Error);
}

TEST(DefaultAllocators, ManyThreadsShareADevice) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 2000; ++i) {
        void* p = gpumem_malloc(ssize_t(512 * (1 + (i * 7 + t) % 64)), 8, reinterpret_cast<void*>(std::uintptr_t(t)));
        static_cast<char*>(p)[0] = char(t);
        gpumem_free(p, 0, 8, reinterpret_cast<void*>(std::uintptr_t(t)));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(gpumem_memory_allocated(8), 0u);
}

TEST(CApi, BaseAllocGivesTheBlockStartAndSizeForInteriorPointers) {
  void* p = nullptr;
  ASSERT_EQ(gpumem_allocate(10000, 7, nullptr, &p), GPUMEM_OK);
  size_t size = 12345;
  EXPECT_EQ(gpumem_base_alloc(p, &size), p);
  EXPECT_GE(size, 10000u);
  const size_t usable = size;
  void* inside = static_cast<char*>(p) + 4321;
  size = 0;
  EXPECT_EQ(gpumem_base_alloc(inside, &size), p);
  EXPECT_EQ(size, usable);
  int stack_value = 0;
  size = 777;
  EXPECT_EQ(gpumem_base_alloc(&stack_value, &size), &stack_value);
  EXPECT_EQ(size, 0u) << "an unknown pointer must report size 0";
  EXPECT_EQ(gpumem_base_alloc(inside, nullptr), p);
  ASSERT_EQ(gpumem_deallocate(p, 7, nullptr), GPUMEM_OK);
  size = 777;
  EXPECT_EQ(gpumem_base_alloc(inside, &size), inside) << "a freed block is not live";
  EXPECT_EQ(size, 0u);
}

TEST(CApi, ATinyFractionOrLimitIsRefusedNotUnlimited) {
  ASSERT_EQ(gpumem_set_limit(std::size_t(16) << 20, 8), GPUMEM_OK);
  for (double tiny : {1e-300, 1e-12})
    EXPECT_EQ(gpumem_set_fraction(tiny, 8), GPUMEM_E_INVALID) << tiny;
  EXPECT_EQ(gpumem_set_limit(1, 8), GPUMEM_E_INVALID);
  void* p = nullptr;
  EXPECT_EQ(gpumem_allocate(std::size_t(64) << 20, 8, nullptr, &p), GPUMEM_E_OOM) << "the 16 MiB limit was lost";
  EXPECT_EQ(gpumem_set_limit(0, 8), GPUMEM_OK);  // 0: no limit
}

}  // namespace
