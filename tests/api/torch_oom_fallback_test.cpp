// gpumem_malloc's out of memory without libc10 in the process (a plain exception carrying the marker), and
// with a libc10.so that Python-style dlopen(RTLD_LOCAL) keeps out of the global symbol scope.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>

#include "gpumem/gpumem.h"

namespace {

TEST(TorchOomFallback, WithoutC10ThenWithALocallyLoadedC10) {
  setenv("GPUMEM_BACKEND", "host", 1);
  setenv("GPUMEM_HOST_CAPACITY", "64MiB", 1);
  ASSERT_EQ(gpumem_torch_oom_available(), 0);
  try {
    gpumem_malloc(ssize_t(1) << 50, 0, nullptr);
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_NE(std::strstr(e.what(), gpumem_oom_marker()), nullptr) << e.what();
    EXPECT_STREQ(gpumem_oom_marker(), GPUMEM_OOM_MARKER);
  }

  void* c10 = dlopen(FAKE_C10_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(c10, nullptr) << dlerror();
  ASSERT_EQ(gpumem_torch_oom_available(), 1);
  try {
    gpumem_malloc(ssize_t(1) << 50, 0, nullptr);
    FAIL() << "no exception";
  } catch (const std::exception& e) {
    EXPECT_STREQ(typeid(e).name(), "N3c1016OutOfMemoryErrorE");
    EXPECT_NE(std::strstr(e.what(), "out of memory"), nullptr) << e.what();
  }
  void* p = gpumem_malloc(1 << 20, 0, nullptr);
  EXPECT_NE(p, nullptr);
  gpumem_free(p, 1 << 20, 0, nullptr);
}

}  // namespace
