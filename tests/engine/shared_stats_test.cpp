// SharedPoolStats: each pool's operations, logged with their time while another thread publishes, are
// folded into the totals in time order across pools, so the peaks over all pools are those of states
// that existed. The tests hold the shared lock while appending, as a publishing thread would.
#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <random>

#include "engine/shared_stats.hpp"

namespace gpumem::engine {
namespace {

constexpr int kAllocatedBytes = 3;  // PoolStats' order: allocation, active, inactive_split, allocated_bytes

StatTotals bytes(std::int64_t large) {
  StatTotals t;
  t.v[kAllocatedBytes][1] = large;
  return t;
}

struct Fixture {
  SharedPoolStats shared;
  std::unique_ptr<StatLog> b = std::make_unique<StatLog>(), a = std::make_unique<StatLog>();
  explicit Fixture(std::int64_t start) {
    std::lock_guard g(shared.lock());
    shared.join(b.get());  // B's log is merged first when the times do not say otherwise
    shared.join(a.get());
    StatPeaks peaks;
    peaks.reset_to(bytes(start));
    shared.seed(bytes(start), peaks);
  }
  // Logged, as while another thread holds the totals.
  void log(StatLog& log, std::int64_t change) {
    std::lock_guard g(shared.lock());
    shared.append(log, bytes(change));
  }
  std::int64_t peak() {
    std::lock_guard g(shared.lock());
    shared.fold(true);
    return shared.peaks().all[kAllocatedBytes];
  }
  std::int64_t large_peak() {
    std::lock_guard g(shared.lock());
    shared.fold(true);
    return shared.peaks().kind[kAllocatedBytes][1];
  }
};

TEST(SharedStats, AFreeLoggedBeforeAnAllocationElsewhereIsFoldedBeforeIt) {
  Fixture f(100);
  f.log(*f.a, -100);  // pool A frees its 100 bytes
  f.log(*f.b, +50);   // then pool B allocates 50: 50 live, never 150
  EXPECT_EQ(f.peak(), 100);
  EXPECT_EQ(f.large_peak(), 100);
}

TEST(SharedStats, WithNothingLoggedAChangeCountsAtOnce) {
  Fixture f(100);
  f.shared.append(*f.a, bytes(+5));  // no other thread: straight into the totals
  {
    std::lock_guard g(f.shared.lock());
    EXPECT_EQ(f.shared.peaks().all[kAllocatedBytes], 105);  // before any fold
  }
  f.log(*f.b, -5);
  f.shared.append(*f.a, bytes(+7));  // B's change is not folded yet: logged after it, so 100 then 107
  EXPECT_EQ(f.peak(), 107);           // (112 had it gone straight in before B's)
}

TEST(SharedStats, AnAllocationLoggedFirstCountsWhereItWasMade) {
  Fixture f(100);
  f.log(*f.a, +80);  // 180
  f.log(*f.b, +50);  // 230
  f.log(*f.b, -50);  // 180
  EXPECT_EQ(f.peak(), 230);
  f.log(*f.a, +10);  // 190
  EXPECT_EQ(f.peak(), 230);
}

TEST(SharedStats, OperationsOfTwoPoolsInterleaveByTime) {
  Fixture f(0);
  f.log(*f.a, +100);  // 100
  f.log(*f.b, +10);   // 110
  f.log(*f.b, +40);   // 150
  f.log(*f.a, -100);  // 50
  f.log(*f.b, +20);   // 70
  EXPECT_EQ(f.peak(), 150);
}

TEST(SharedStats, ALogThatFillsFoldsItselfAndLosesNothing) {
  Fixture f(0);
  std::int64_t live = 0, most = 0;
  for (std::uint64_t i = 0; i < 5 * StatLog::kSize; ++i) {  // more than a log holds, with no reader
    const std::int64_t change = (i % 3 == 2) ? -2 : +1;
    live += change;
    most = std::max(most, live);
    if (i < StatLog::kSize - 1) f.log(*f.a, change);  // logged while the totals are busy
    else f.shared.append(i % 2 ? *f.a : *f.b, bytes(change));  // then logged as long as any is unfolded
  }
  EXPECT_EQ(f.peak(), most);
  std::lock_guard g(f.shared.lock());
  f.shared.reset_peaks();
  EXPECT_EQ(f.shared.peaks().all[kAllocatedBytes], live);
}

// Random changes to every statistic and both kinds from three pools, some logged while the totals are
// held (as under contention), folded by the pools themselves and by readers: the peaks are always those
// of the changes applied one by one in the order they were made, whether a fold merged the logs or
// found that no order could raise a peak.
TEST(SharedStats, PeaksMatchEveryChangeAppliedInTheOrderMade) {
  SharedPoolStats shared;
  std::unique_ptr<StatLog> logs[3] = {std::make_unique<StatLog>(), std::make_unique<StatLog>(),
                                      std::make_unique<StatLog>()};
  StatTotals model;
  StatPeaks model_peaks;
  {
    std::lock_guard g(shared.lock());
    for (auto& log : logs) shared.join(log.get());
    shared.seed(model, model_peaks);
  }
  auto expect_peaks = [&](int step) {
    std::lock_guard g(shared.lock());
    shared.fold(true);
    for (int i = 0; i < kStatCount; ++i) {
      ASSERT_EQ(shared.peaks().all[i], model_peaks.all[i]) << "stat " << i << ", step " << step;
      for (int k = 0; k < 2; ++k) ASSERT_EQ(shared.peaks().kind[i][k], model_peaks.kind[i][k]) << step;
    }
  };
  std::mt19937 rng(7);
  int since_read = 0;
  for (int step = 0; step < 200000; ++step) {
    const unsigned r = rng() % 1000;
    if (r < 2 || since_read == 100) {  // a reader; the test's own logging never fills a log
      expect_peaks(step);
      if (r == 0) {
        std::lock_guard g(shared.lock());
        shared.reset_peaks();
        model_peaks.reset_to(model);
      }
      since_read = 0;
      continue;
    }
    StatTotals change;
    for (int n = 1 + int(rng() % 3); n > 0; --n) change.v[rng() % kStatCount][rng() % 2] += int(rng() % 21) - 10;
    model.add(change);
    model_peaks.raise(model);
    StatLog& log = *logs[rng() % 3];
    if (r < 700) {
      std::lock_guard g(shared.lock());  // another thread publishing: logged with its time
      shared.append(log, change);
      ++since_read;
    } else {
      shared.append(log, change);
    }
    // The next change gets a later time (a tie between pools would leave their order to the fold).
    for (const std::uint64_t t = stat_clock(); stat_clock() == t;) {
    }
  }
  expect_peaks(-1);
}

}  // namespace
}  // namespace gpumem::engine
