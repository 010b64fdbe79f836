// The backend conformance suite: every Backend implementation must pass the TEST_Ps in
// conformance_test.cpp. A backend joins the suite from its own file with one instantiation:
//
//   using gpumem::conformance::BackendConformance;
//   INSTANTIATE_TEST_SUITE_P(Cuda, BackendConformance,
//                            ::testing::Values(gpumem::conformance::BackendUnderTest{...}),
//                            gpumem::conformance::ConformanceName{});
//
// A backend that cannot run here (no driver, no device) makes its factory throw
// BackendUnavailableError: every test then skips with that error's message.
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "gpumem/backend.hpp"

namespace gpumem::conformance {

// What a test asks of the backend it gets. Backends that cannot honor a field ignore it and say so
// through the BackendUnderTest flags below.
struct BackendParams {
  std::size_t capacity = std::size_t(256) << 20;  // physical bytes the backend may hand out
  std::size_t granularity = std::size_t(64) << 10; // a hint; tests always use backend->granularity()
  bool manual_events = false;                      // events complete only via complete_stream
};

struct BackendUnderTest {
  std::string name;  // test-name suffix: letters, digits and '_' only
  std::function<std::shared_ptr<Backend>(const BackendParams&)> factory;

  // Mapped memory can be written and read back (through copy_in/copy_out, or plain memcpy when they are
  // empty): enables the "same physical bytes through two mappings" tests.
  bool has_real_memory = false;
  std::function<void(Backend&, DevicePtr dst, const void* src, std::size_t bytes)> copy_in;
  std::function<void(Backend&, void* dst, DevicePtr src, std::size_t bytes)> copy_out;

  // BackendParams::capacity is enforced exactly (out-of-memory tests run only then).
  bool honors_capacity = true;

  // Manual event control: completes every event recorded so far on a stream. Empty when the backend's
  // events complete on their own (CUDA); the manual-event tests then skip.
  std::function<void(Backend&, StreamId)> complete_stream;

  // Live physical chunks / mappings, for "no partial state" checks; empty when the backend cannot tell.
  std::function<std::size_t(const Backend&)> live_chunks;
  std::function<std::size_t(const Backend&)> live_mappings;
};

// Lets gtest print a parameter by its name.
inline void PrintTo(const BackendUnderTest& b, std::ostream* os) { *os << b.name; }

struct ConformanceName {
  std::string operator()(const ::testing::TestParamInfo<BackendUnderTest>& info) const {
    return info.param.name;
  }
};

// The fixture of the suite; declared here so instantiations in other files can name it.
class BackendConformance : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  // Makes the backend under test with these params; nullptr (the test skips) when it is unavailable.
  std::shared_ptr<Backend> make(const BackendParams& params = {});
  void write(Backend& b, DevicePtr dst, const void* src, std::size_t bytes);
  void read(Backend& b, void* dst, DevicePtr src, std::size_t bytes);
  // Checks live chunk / mapping counts where the backend can tell them.
  void expect_live_chunks(const Backend& b, std::size_t n);
  void expect_live_mappings(const Backend& b, std::size_t n);
  std::string unavailable_;  // why make() returned no backend
};

}  // namespace gpumem::conformance

// Skips (with the reason) tests that need what this backend does not have. Macros because GTEST_SKIP
// returns from the test body.
#define MAKE_OR_SKIP(var, params) \
  auto var = make(params);        \
  if (!var) GTEST_SKIP() << unavailable_
#define REQUIRE_VMM(b) \
  if (!(b)->supports_virtual_memory()) GTEST_SKIP() << GetParam().name << " has no virtual memory management"
#define REQUIRE_REAL_MEMORY() \
  if (!GetParam().has_real_memory) GTEST_SKIP() << GetParam().name << " has no real memory to read back"
