// gpumem_torch_enable_cache_info (src/api/torch_cache_info.cpp) against a stand-in CUDAPluggableAllocator
// (tests/api/fake_pluggable.cpp) built as a RELRO shared library, on the host backend.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <stdexcept>

#include "gpumem/gpumem.h"

extern "C" void* fake_pluggable_make();
extern "C" std::size_t fake_pluggable_cache_info(void* allocator, std::int8_t device);

namespace {

TEST(TorchCacheInfo, PluggableAllocatorAnswersFromGpumemOnceEnabled) {
  setenv("GPUMEM_BACKEND", "host", 1);
  setenv("GPUMEM_HOST_CAPACITY", "64MiB", 1);
  void* allocator = fake_pluggable_make();
  EXPECT_THROW(fake_pluggable_cache_info(allocator, 0), std::runtime_error);

  ASSERT_EQ(gpumem_torch_enable_cache_info(), 1);
  EXPECT_EQ(gpumem_torch_enable_cache_info(), 1);  // a second call is harmless
  ASSERT_EQ(gpumem_set_limit(16 << 20, 0), GPUMEM_OK);
  void* held = nullptr;
  ASSERT_EQ(gpumem_allocate(4 << 20, 0, nullptr, &held), GPUMEM_OK);
  std::size_t expected = 0;
  ASSERT_EQ(gpumem_cache_info(0, &expected), GPUMEM_OK);
  EXPECT_GT(expected, 0u);
  EXPECT_LE(expected, std::size_t(16) << 20);
  EXPECT_EQ(fake_pluggable_cache_info(allocator, 0), expected);
  gpumem_deallocate(held, 0, nullptr);
}

}  // namespace
