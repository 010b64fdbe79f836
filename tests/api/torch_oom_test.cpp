// gpumem_malloc's out of memory as PyTorch's c10::OutOfMemoryError (src/api/torch_oom.cpp), against the
// stand-in libc10.so this test links (tests/api/fake_c10.*), on the host backend through libgpumem.so.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_c10.hpp"
#include "gpumem/gpumem.h"

extern "C" int fake_c10_destroyed;

namespace {

struct Observed {
  int calls = 0, device = -2;
  std::size_t requested = 0, allowed = 0;
} observed;

void observer(int device, size_t requested, size_t device_allowed, size_t /*device_free*/) {
  ++observed.calls;
  observed.device = device;
  observed.requested = requested;
  observed.allowed = device_allowed;
}

class TorchOom : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    setenv("GPUMEM_BACKEND", "host", 1);
    setenv("GPUMEM_HOST_CAPACITY", "64MiB", 1);
  }
};

TEST_F(TorchOom, AbsurdSizeThrowsC10OutOfMemoryErrorAndTheProcessGoesOn) {
  ASSERT_EQ(gpumem_torch_oom_available(), 1);
  const int destroyed_before = fake_c10_destroyed;
  bool caught = false;
  try {
    gpumem_malloc(ssize_t(1) << 50, 0, nullptr);  // 1 PiB
  } catch (const c10::OutOfMemoryError& e) {
    caught = true;
    EXPECT_NE(e.msg().find("out of memory"), std::string::npos) << e.msg();
    EXPECT_STREQ(e.function(), "gpumem_malloc");
    EXPECT_NE(std::string(e.what()).find(e.msg()), std::string::npos);
  }
  EXPECT_TRUE(caught);
  EXPECT_EQ(fake_c10_destroyed, destroyed_before + 1) << "the exception must be destroyed exactly once";
  void* p = gpumem_malloc(1 << 20, 0, nullptr);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 1 << 20);
  gpumem_free(p, 1 << 20, 0, nullptr);
}

TEST_F(TorchOom, LimitAndDeviceFullAreC10ErrorsCatchableAsStdException) {
  ASSERT_EQ(gpumem_set_limit(8 << 20, 1), GPUMEM_OK);
  void* held = gpumem_malloc(6 << 20, 1, nullptr);
  try {
    gpumem_malloc(6 << 20, 1, nullptr);
    FAIL() << "no exception over the limit";
  } catch (const std::exception& e) {
    EXPECT_NE(dynamic_cast<const c10::OutOfMemoryError*>(&e), nullptr) << "not c10's type: " << e.what();
    EXPECT_NE(dynamic_cast<const c10::Error*>(&e), nullptr);
  }
  gpumem_free(held, 6 << 20, 1, nullptr);
  // The device itself full (64 MiB host capacity, no limit on device 2).
  EXPECT_THROW(gpumem_malloc(ssize_t(100) << 20, 2, nullptr), c10::OutOfMemoryError);
  void* p = gpumem_malloc(6 << 20, 1, nullptr);
  EXPECT_NE(p, nullptr);
  gpumem_free(p, 6 << 20, 1, nullptr);
}

TEST_F(TorchOom, ObserverSeesEachOutOfMemoryBeforeTheThrow) {
  ASSERT_EQ(gpumem_set_oom_observer(observer), GPUMEM_OK);
  void* held = gpumem_malloc(3 << 20, 3, nullptr);
  EXPECT_THROW(gpumem_malloc(ssize_t(1) << 45, 3, nullptr), c10::OutOfMemoryError);
  EXPECT_EQ(observed.calls, 1);
  EXPECT_EQ(observed.device, 3);
  EXPECT_EQ(observed.requested, std::size_t(1) << 45);
  EXPECT_EQ(observed.allowed, std::size_t(64) << 20) << "PyTorch passes the device's total without a limit";
  ASSERT_EQ(gpumem_set_limit(16 << 20, 3), GPUMEM_OK);
  EXPECT_THROW(gpumem_malloc(ssize_t(20) << 20, 3, nullptr), c10::OutOfMemoryError);
  EXPECT_EQ(observed.calls, 2);
  EXPECT_EQ(observed.allowed, std::size_t(16) << 20) << "and the allowed maximum under one";
  gpumem_set_oom_observer(nullptr);
  EXPECT_THROW(gpumem_malloc(ssize_t(1) << 45, 3, nullptr), c10::OutOfMemoryError);
  EXPECT_EQ(observed.calls, 2);
  gpumem_free(held, 3 << 20, 3, nullptr);
}

TEST_F(TorchOom, OtherFailuresStayPlainExceptions) {
  try {
    gpumem_malloc(-5, 0, nullptr);
    FAIL() << "no exception for a negative size";
  } catch (const std::exception& e) {
    EXPECT_EQ(dynamic_cast<const c10::Error*>(&e), nullptr);
  }
}

}  // namespace
