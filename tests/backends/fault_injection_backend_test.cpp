// The fault-injection wrapper fails exactly the call it is told to, with the error it is told to,
// and otherwise behaves as the backend it wraps.
#include <gtest/gtest.h>

#include "gpumem/fault_injection_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {

constexpr std::size_t kGran = std::size_t(2) << 20;

struct Wrapped {
  std::shared_ptr<SimBackend> sim = std::make_shared<SimBackend>();
  FaultInjectionBackend fi;
  explicit Wrapped(FaultInjectionOptions o) : fi(sim, o) {}
};

TEST(FaultInjectionBackend, FailsExactlyTheNthFallibleCall) {
  Wrapped w({.fail_at = 3});
  DevicePtr va = w.fi.reserve(4 * kGran);           // 1
  ChunkHandle c = w.fi.create_chunk(kGran);        // 2
  EXPECT_THROW(w.fi.map(va, kGran, c, 0), BackendError);  // 3
  EXPECT_EQ(w.sim->live_mappings(), 0u) << "the failed call reached the wrapped backend";
  w.fi.map(va, kGran, c, 0);                        // 4: later calls go through
  EXPECT_EQ(w.sim->live_mappings(), 1u);
  EXPECT_EQ(w.fi.fallible_calls(), 4u);
  EXPECT_EQ(w.fi.injected_failures(), 1u);
}

TEST(FaultInjectionBackend, NaturalKindMatchesTheCall) {
  for (std::uint64_t n = 1; n <= 5; ++n) {
    Wrapped w({.fail_at = n});
    auto call = [&](std::uint64_t i) {
      switch (i) {
        case 1: w.fi.reserve(kGran); break;
        case 2: w.fi.create_chunk(kGran); break;
        case 3: w.fi.allocate(10); break;
        case 4: w.fi.record_event(0); break;
        default: {
          DevicePtr va = w.fi.reserve(kGran);  // call #5 when n == 5
          w.fi.map(va, kGran, w.fi.create_chunk(kGran), 0);
          break;
        }
      }
    };
    for (std::uint64_t i = 1; i < n; ++i) call(i);
    if (n == 2 || n == 3) {
      EXPECT_THROW(call(n), OutOfMemoryError) << "call " << n;
    } else {
      try {
        call(n);
        ADD_FAILURE() << "call " << n << " did not fail";
      } catch (const OutOfMemoryError&) {
        ADD_FAILURE() << "call " << n << " failed with OutOfMemoryError, expected BackendError";
      } catch (const BackendError&) {
      }
    }
  }
}

TEST(FaultInjectionBackend, ConfiguredKindOverridesTheNaturalOne) {
  Wrapped oom({.fail_at = 1, .kind = FaultKind::out_of_memory});
  EXPECT_THROW(oom.fi.reserve(kGran), OutOfMemoryError);
  Wrapped err({.fail_at = 1, .kind = FaultKind::backend_error});
  try {
    err.fi.create_chunk(kGran);
    FAIL() << "no failure injected";
  } catch (const OutOfMemoryError&) {
    FAIL() << "expected a BackendError, got OutOfMemoryError";
  } catch (const BackendError& e) {
    EXPECT_NE(std::string(e.what()).find("create_chunk"), std::string::npos) << e.what();
  }
}

TEST(FaultInjectionBackend, PersistentFailureAndRearming) {
  Wrapped w({.fail_at = 2, .persistent = true});
  ChunkHandle c = w.fi.create_chunk(kGran);
  for (int i = 0; i < 3; ++i) EXPECT_THROW(w.fi.create_chunk(kGran), OutOfMemoryError);
  EXPECT_EQ(w.sim->live_chunks(), 1u);
  w.fi.arm(0);
  ChunkHandle c2 = w.fi.create_chunk(kGran);
  w.fi.arm(1);
  EXPECT_THROW(w.fi.allocate(1), OutOfMemoryError);
  EXPECT_NO_THROW(w.fi.release_event(w.fi.record_event(0)));
  w.fi.release_chunk(c);
  w.fi.release_chunk(c2);
  EXPECT_EQ(w.sim->live_chunks(), 0u);
}

TEST(FaultInjectionBackend, ReleasesAreNeverCountedOrFailed) {
  Wrapped w({.fail_at = 1, .persistent = true});
  w.fi.release_chunk(42);
  w.fi.unmap(0, kGran);
  w.fi.free(0);
  w.fi.release_range(0, kGran);
  w.fi.release_event(3);
  w.fi.synchronize();
  EXPECT_EQ(w.fi.fallible_calls(), 0u);
  EXPECT_TRUE(w.fi.event_done(0));
  EXPECT_EQ(w.fi.mem_info().total, w.sim->mem_info().total);
}

TEST(FaultInjectionBackend, MirrorsTheWrappedBackend) {
  Wrapped w({});
  EXPECT_STREQ(w.fi.name(), "sim");
  EXPECT_EQ(w.fi.granularity(), w.sim->granularity());
  EXPECT_TRUE(w.fi.supports_virtual_memory());
  DevicePtr va = w.fi.reserve(kGran);
  ChunkHandle c = w.fi.create_chunk(kGran);
  w.fi.map(va, kGran, c, 0);
  w.fi.unmap(va, kGran);
  w.fi.release_chunk(c);
  w.fi.release_range(va, kGran);
  w.fi.free(w.fi.allocate(1));
  w.fi.synchronize();
  const BackendCallCounts& n = w.fi.call_counts();
  EXPECT_EQ(n.creates, 1u);
  EXPECT_EQ(n.maps, 1u);
  EXPECT_EQ(n.unmaps, 1u);
  EXPECT_EQ(n.chunk_releases, 1u);
  EXPECT_EQ(n.plain_allocs, 1u);
  EXPECT_EQ(n.plain_frees, 1u);
  EXPECT_EQ(n.syncs, 1u);
  EXPECT_EQ(n.device_calls(), w.sim->call_counts().device_calls());
  EXPECT_THROW(FaultInjectionBackend(nullptr), BackendError);
}

}  // namespace
}  // namespace gpumem
