// Bad input never crashes the allocator or corrupts it: invalid frees are reported and counted,
// impossible sizes are out-of-memory errors that name the request, bad fractions are rejected.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gpumem/allocator.hpp"
#include "gpumem/host_backend.hpp"
#include "gpumem/sim_backend.hpp"

namespace gpumem {
namespace {

constexpr std::size_t kMiB = std::size_t(1) << 20;

struct Fixture {
  std::shared_ptr<SimBackend> sim;
  Allocator alloc;
  std::vector<std::string> reports;
  explicit Fixture(std::size_t capacity = std::size_t(1) << 30) : sim(make(capacity)), alloc(sim) {
    alloc.set_error_handler([this](const std::string& m) { reports.push_back(m); });
  }
  static std::shared_ptr<SimBackend> make(std::size_t capacity) {
    SimBackendOptions o;
    o.capacity = capacity;
    return std::make_shared<SimBackend>(o);
  }
  // The allocator is whole: invariants hold, the live bytes add up, and it still serves requests.
  void expect_consistent(std::int64_t live_blocks) {
    EXPECT_NO_THROW(alloc.check_invariants());
    EXPECT_EQ(alloc.stats().allocation[kAggregatePool].current, live_blocks);
    void* p = nullptr;
    EXPECT_NO_THROW(p = alloc.allocate(3 * kMiB));
    EXPECT_NE(p, nullptr);
    alloc.deallocate(p);
  }
};

TEST(BadInput, DoubleFreeIsReportedAndIgnored) {
  Fixture f;
  void* a = f.alloc.allocate(4096);
  void* b = f.alloc.allocate(4096);
  void* c = f.alloc.allocate(4096);
  f.alloc.deallocate(b);
  EXPECT_EQ(f.alloc.try_deallocate(b), FreeResult::double_free);
  f.alloc.deallocate(b);
  ASSERT_EQ(f.reports.size(), 1u);
  EXPECT_NE(f.reports[0].find("double free"), std::string::npos) << f.reports[0];
  EXPECT_EQ(f.alloc.stats().num_invalid_frees, 1);
  f.expect_consistent(2);
  f.alloc.deallocate(a);
  f.alloc.deallocate(c);
  f.expect_consistent(0);
}

TEST(BadInput, FreeingTheSameLargeBlockTwiceIsRejected) {
  Fixture f;
  void* p = f.alloc.allocate(64 * kMiB);
  f.alloc.deallocate(p);
  // The block may have merged with free neighbours; it must not be "freed" a second time either way.
  FreeResult r = f.alloc.try_deallocate(p);
  EXPECT_TRUE(r == FreeResult::double_free || r == FreeResult::unknown_pointer) << int(r);
  f.expect_consistent(0);
  EXPECT_EQ(f.alloc.stats().allocated_bytes[kAggregatePool].current, 0);
}

TEST(BadInput, UnknownPointersAreReportedAndCounted) {
  Fixture f;
  void* live = f.alloc.allocate(8192);
  int local = 0;
  void* bogus[] = {&local, reinterpret_cast<void*>(0x10), static_cast<char*>(live) + 512,
                   static_cast<char*>(live) + 1};
  for (void* p : bogus) EXPECT_EQ(f.alloc.try_deallocate(p), FreeResult::unknown_pointer) << p;
  for (void* p : bogus) f.alloc.deallocate(p);
  EXPECT_EQ(f.reports.size(), std::size(bogus));
  for (const std::string& m : f.reports) EXPECT_NE(m.find("never handed it out"), std::string::npos) << m;
  EXPECT_EQ(f.alloc.stats().num_invalid_frees, std::int64_t(std::size(bogus)));
  EXPECT_EQ(f.alloc.block_size(&local), 0u);
  EXPECT_EQ(f.alloc.block_size(live), 8192u) << "the live block was disturbed";
  f.expect_consistent(1);
  f.alloc.deallocate(live);
}

TEST(BadInput, NullIsAHarmlessFree) {
  Fixture f;
  EXPECT_EQ(f.alloc.try_deallocate(nullptr), FreeResult::null_pointer);
  f.alloc.deallocate(nullptr);
  EXPECT_TRUE(f.reports.empty());
  EXPECT_EQ(f.alloc.stats().num_invalid_frees, 0);
}

TEST(BadInput, TheDefaultHandlerWritesOneSentenceToStderr) {
  SimBackendOptions o;
  Allocator a(std::make_shared<SimBackend>(o));
  int local = 0;
  ::testing::internal::CaptureStderr();
  a.deallocate(&local);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("gpumem:"), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(BadInput, AThrowingErrorHandlerDoesNotEscapeDeallocate) {
  Fixture f;
  f.alloc.set_error_handler([](const std::string&) { throw std::runtime_error("handler failed"); });
  int local = 0;
  EXPECT_NO_THROW(f.alloc.deallocate(&local));
  EXPECT_EQ(f.alloc.stats().num_invalid_frees, 1);
  f.expect_consistent(0);
}

TEST(BadInput, ZeroBytesReturnsNull) {
  Fixture f;
  EXPECT_EQ(f.alloc.allocate(0), nullptr);
  EXPECT_EQ(f.alloc.allocate(0, 5), nullptr);
  DeviceStats s = f.alloc.stats();
  EXPECT_EQ(s.allocation[kAggregatePool].allocated, 0);
  EXPECT_EQ(s.reserved_bytes[kAggregatePool].current, 0);
  f.expect_consistent(0);
}

TEST(BadInput, ImpossibleSizesAreOutOfMemoryNamingTheRequest) {
  Fixture f;  // a 1 GiB device
  void* keep = f.alloc.allocate(100 * kMiB);
  const std::size_t sizes[] = {std::numeric_limits<std::size_t>::max(), std::numeric_limits<std::size_t>::max() - 511,
                               std::size_t(1) << 50, (std::size_t(1) << 50) + 1, std::size_t(2) << 30,
                               (std::size_t(1) << 30) + 1};
  std::int64_t ooms = 0;
  for (std::size_t bytes : sizes) {
    try {
      f.alloc.allocate(bytes);
      ADD_FAILURE() << "allocating " << bytes << " bytes succeeded";
    } catch (const OutOfMemoryError& e) {
      ++ooms;
      const std::string what = e.what();
      EXPECT_NE(what.find(format_bytes(bytes)), std::string::npos) << what;
      EXPECT_NE(what.find("allocated"), std::string::npos) << what;
      EXPECT_EQ(e.state().requested, bytes);
      EXPECT_EQ(e.state().allocated, f.alloc.block_size(keep));
    }
    EXPECT_EQ(f.alloc.stats().num_ooms, ooms);
    EXPECT_EQ(f.alloc.stats().allocated_bytes[kAggregatePool].current, std::int64_t(100 * kMiB));
  }
  f.expect_consistent(1);
  // What does fit still fits after all those failures.
  void* big = f.alloc.allocate(800 * kMiB);
  EXPECT_NE(big, nullptr);
  f.alloc.deallocate(big);
  f.alloc.deallocate(keep);
  f.alloc.empty_cache();
  EXPECT_EQ(f.sim->used_bytes(), 0u);
}

TEST(BadInput, MemoryFractionOutsideZeroToOneIsRejected) {
  Fixture f;
  f.alloc.set_memory_fraction(0.5);
  const std::size_t limit = f.alloc.limit();
  EXPECT_EQ(limit, std::size_t(512) * kMiB);
  for (double bad : {0.0, -0.0, -0.5, 1.0000001, 1.5, 100.0, std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    try {
      f.alloc.set_memory_fraction(bad);
      ADD_FAILURE() << "fraction " << bad << " accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("(0, 1]"), std::string::npos) << e.what();
    }
    EXPECT_EQ(f.alloc.limit(), limit) << "a rejected fraction changed the limit";
  }
  f.alloc.set_memory_fraction(1.0);
  EXPECT_EQ(f.alloc.limit(), std::size_t(1) << 30);
  f.expect_consistent(0);
}

TEST(BadInput, ATinyFractionOrLimitIsAnErrorNotNoLimit) {
  Fixture f;
  f.alloc.set_limit(64 * kMiB);
  // 1e-300 and 1e-12 of the device round to 0 bytes, which would mean "no limit"; 1e-9 to 1 byte.
  for (double tiny : {1e-300, 1e-12, 1e-9, std::numeric_limits<double>::denorm_min()})
    EXPECT_THROW(f.alloc.set_memory_fraction(tiny), std::invalid_argument) << tiny;
  for (std::size_t bytes : {std::size_t(1), std::size_t(4095), f.sim->granularity() - 1})
    EXPECT_THROW(f.alloc.set_limit(bytes), std::invalid_argument) << bytes;
  EXPECT_EQ(f.alloc.limit(), 64 * kMiB) << "a refused cap changed the limit";
  f.alloc.set_limit(f.sim->granularity());
  EXPECT_THROW(f.alloc.allocate(2 * f.sim->granularity()), OutOfMemoryError);
  f.alloc.set_limit(0);
  EXPECT_EQ(f.alloc.limit(), 0u);
  f.expect_consistent(0);
}

TEST(BadInput, ALimitBelowWhatIsLiveOnlyStopsGrowth) {
  Fixture f;
  void* p = f.alloc.allocate(200 * kMiB);
  f.alloc.set_limit(50 * kMiB);
  EXPECT_THROW(f.alloc.allocate(100 * kMiB), OutOfMemoryError);
  EXPECT_EQ(f.alloc.block_size(p), 200 * kMiB) << "live memory must survive a lower limit";
  f.alloc.deallocate(p);
  // Cached memory may still be reused (as in PyTorch: the limit gates growth, not reuse)...
  void* q = f.alloc.allocate(40 * kMiB);
  // ...but growing past the limit fails.
  EXPECT_THROW(f.alloc.allocate(300 * kMiB), OutOfMemoryError);
  f.alloc.deallocate(q);
  f.alloc.empty_cache();
  EXPECT_EQ(f.alloc.stats().reserved_bytes[kAggregatePool].current, 0);
  EXPECT_NO_THROW(f.alloc.deallocate(f.alloc.allocate(50 * kMiB)));
  EXPECT_LE(f.alloc.stats().reserved_bytes[kAggregatePool].current, std::int64_t(50 * kMiB));
  f.alloc.check_invariants();
}

TEST(BadInput, AnAllocatorNeedsABackend) { EXPECT_THROW(Allocator(nullptr), std::invalid_argument); }

// A request the device cannot hold made the large part of its growth, failed on the rest, and kept what it
// had made reserved after the out-of-memory error (1.75 GiB of a 4 GiB device nobody could use).
TEST(BadInput, AFailedRequestLeavesReservedWhereItWas) {
  HostBackendOptions o;  // makes a request's pages one by one until the device refuses one
  o.capacity = std::size_t(4) << 30;
  Allocator alloc(std::make_shared<HostBackend>(o));
  void* p = alloc.allocate(2 * kMiB);
  alloc.deallocate(p);
  const auto before = alloc.stats().reserved_bytes[kAggregatePool].current;
  for (std::size_t bytes : {std::size_t(1) << 40, (std::size_t(4) << 30) + 1, std::size_t(5) << 30}) {
    EXPECT_THROW(alloc.allocate(bytes), OutOfMemoryError) << bytes;
    EXPECT_LE(alloc.stats().reserved_bytes[kAggregatePool].current, before) << bytes;
    // Not even for a moment: more than the device holds is refused before any page is made.
    EXPECT_LE(alloc.stats().reserved_bytes[kAggregatePool].peak, 2 * kMiB) << bytes;
    EXPECT_NO_THROW(alloc.check_invariants());
  }
  void* q = alloc.allocate(std::size_t(3) << 30);  // the device is whole for the next request
  alloc.deallocate(q);
}

}  // namespace
}  // namespace gpumem
