// MapAhead (src/backends/map_ahead.hpp) against a fake driver that keeps the mappings it was asked for:
// pages taken are mapped where they should be with access granted, nothing is leaked or left mapped,
// and a worker still busy is waited for, not raced (run under TSan too).
#include "backends/map_ahead.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "wait_child.hpp"

namespace gpumem {
namespace {

constexpr std::size_t kPage = 2 << 20;
constexpr DevicePtr kBase = DevicePtr(1) << 40;
constexpr std::chrono::milliseconds kNeverIdle = std::chrono::hours(1);  // no give-back on a slow machine

class FakeDriver : public AheadDriver {
 public:
  bool create(std::uint64_t* handle, std::size_t page) override {
    std::lock_guard lock(m);
    EXPECT_EQ(page, kPage);
    if (fail_create_after >= 0 && long(created) >= fail_create_after) return false;
    *handle = ++created;
    live.insert(*handle);
    slow();
    return true;
  }
  bool map(DevicePtr va, std::size_t, std::uint64_t handle) override {
    std::lock_guard lock(m);
    if (fail_map_at == va) return false;
    EXPECT_TRUE(live.count(handle));
    EXPECT_FALSE(mapped.count(va)) << "mapped twice at one address";
    mapped[va] = handle;
    return true;
  }
  bool set_access(DevicePtr va, std::size_t bytes) override {
    std::lock_guard lock(m);
    for (DevicePtr p = va; p < va + bytes; p += kPage) {
      EXPECT_TRUE(mapped.count(p)) << "access over an unmapped page";
      accessible.insert(p);
    }
    return !fail_access;
  }
  void unmap(DevicePtr va, std::size_t) override {
    std::lock_guard lock(m);
    EXPECT_EQ(mapped.erase(va), 1u) << "unmap of an address not mapped";
    accessible.erase(va);
  }
  void release(std::uint64_t handle) override {
    std::lock_guard lock(m);
    EXPECT_EQ(live.erase(handle), 1u) << "release of a handle not live";
  }
  void slow() {
    if (delay_us) std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  }
  // The caller's own bookkeeping of pages it took: unmap and release them as the backend would.
  void give_back(DevicePtr va, const std::vector<std::uint64_t>& pages) {
    for (std::size_t i = 0; i < pages.size(); ++i) unmap(va + i * kPage, kPage);
    for (auto h : pages) release(h);
  }

  std::mutex m;
  std::uint64_t created = 0;
  long fail_create_after = -1;
  bool fail_access = false;
  DevicePtr fail_map_at = 0;
  int delay_us = 0;
  std::set<std::uint64_t> live;
  std::map<DevicePtr, std::uint64_t> mapped;
  std::set<DevicePtr> accessible;
};

TEST(MapAhead, PagesTakenLieMappedAtTheirAddressesWithAccess) {
  FakeDriver d;
  d.delay_us = 200;  // the worker is still busy when take() comes: it must wait, not race
  {
    MapAhead ahead(d, kPage, kNeverIdle);
    ahead.prepare(kBase, 8 * kPage);
    auto first = ahead.take(kBase, 3);
    ASSERT_EQ(first.size(), 3u);
    for (std::size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(d.mapped.at(kBase + i * kPage), first[i]);
      EXPECT_TRUE(d.accessible.count(kBase + i * kPage));
    }
    EXPECT_TRUE(ahead.take(kBase, 1).empty()) << "those addresses were taken";
    auto rest = ahead.take(kBase + 3 * kPage, 100);
    EXPECT_EQ(rest.size(), 5u);
    EXPECT_EQ(ahead.waiting(), 0u);
    EXPECT_EQ(ahead.pages_made(), 8u);
    EXPECT_EQ(ahead.pages_held(), 0u) << "the caller's now";
    EXPECT_EQ(ahead.pages_held_peak(), 8u);
    d.give_back(kBase, first);
    d.give_back(kBase + 3 * kPage, rest);
  }
  EXPECT_TRUE(d.live.empty());
  EXPECT_TRUE(d.mapped.empty());
}

TEST(MapAhead, ClearUnmapsTheFrontOrEverythingInTheWayAndKeepsThePagesAsSpares) {
  FakeDriver d;
  MapAhead ahead(d, kPage, kNeverIdle);
  ahead.prepare(kBase, 6 * kPage);
  ahead.clear(kBase - kPage, 2 * kPage + 1);  // overlaps the first two pages from below: the front goes
  EXPECT_EQ(ahead.waiting(), 4u);
  EXPECT_FALSE(d.mapped.count(kBase));
  EXPECT_FALSE(d.mapped.count(kBase + kPage));
  EXPECT_TRUE(ahead.take(kBase, 1).empty());
  ahead.clear(kBase + 10 * kPage, kPage);  // elsewhere: nothing happens
  EXPECT_EQ(ahead.waiting(), 4u);
  ahead.clear(kBase + 3 * kPage, kPage);  // the middle: all of it goes
  EXPECT_EQ(ahead.waiting(), 0u);
  EXPECT_TRUE(d.mapped.empty());
  EXPECT_EQ(ahead.pages_unused(), 6u);
  EXPECT_EQ(ahead.held(), 6u) << "unmapped, kept for the next pages";
  EXPECT_EQ(ahead.pages_held(), 6u);
  EXPECT_EQ(d.live.size(), 6u);
  auto spares = ahead.take_spare(2);  // a caller's own growth takes two of them, unmapped
  EXPECT_EQ(spares.size(), 2u);
  ahead.prepare(kBase + 100 * kPage, 8 * kPage);  // the other four are the new run's first
  EXPECT_EQ(ahead.waiting(), 8u);
  EXPECT_EQ(d.created, 10u) << "4 spares used again, 4 new pages";
  EXPECT_EQ(ahead.pages_made(), 10u);
  EXPECT_EQ(ahead.pages_held(), 8u);
  EXPECT_EQ(ahead.held(), 8u) << "no spare is left over";
  for (auto h : spares) d.release(h);
  ahead.drop();
  EXPECT_TRUE(d.live.empty());
  EXPECT_TRUE(d.mapped.empty());
  EXPECT_EQ(ahead.pages_held(), 0u);
}

TEST(MapAhead, GiveBackReleasesWhatWaitsAndTheSparesOnTheWorker) {
  FakeDriver d;
  MapAhead ahead(d, kPage, kNeverIdle);
  ahead.prepare(kBase, 6 * kPage);
  ahead.clear(kBase, 2 * kPage);  // two spares, four waiting
  ASSERT_EQ(ahead.held(), 6u);
  ahead.give_back();
  EXPECT_EQ(ahead.held(), 0u);
  EXPECT_EQ(ahead.pages_held(), 0u);
  EXPECT_TRUE(d.live.empty());
  EXPECT_TRUE(d.mapped.empty());
  ahead.prepare(kBase + 6 * kPage, 2 * kPage);  // and it makes pages again afterwards
  EXPECT_EQ(ahead.take(kBase + 6 * kPage, 2).size(), 2u);
}

TEST(MapAhead, APrepareElsewhereMovesWhatWaitsAndOneAtTheSamePlaceKeepsIt) {
  FakeDriver d;
  MapAhead ahead(d, kPage, kNeverIdle);
  ahead.prepare(kBase, 4 * kPage);
  ASSERT_EQ(ahead.waiting(), 4u);
  ahead.prepare(kBase, 16 * kPage);  // already there
  EXPECT_EQ(ahead.waiting(), 4u);
  EXPECT_EQ(d.created, 4u);
  ahead.prepare(kBase + 64 * kPage, 2 * kPage);  // the worker unmaps the four and maps two of them there
  EXPECT_EQ(ahead.waiting(), 2u);
  EXPECT_EQ(d.created, 4u) << "no new page for the second run";
  EXPECT_EQ(d.mapped.size(), 2u);
  EXPECT_TRUE(ahead.take(kBase, 4).empty());
  auto taken = ahead.take(kBase + 64 * kPage, 4);
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_EQ(d.mapped.at(kBase + 64 * kPage), taken[0]);
  EXPECT_EQ(ahead.held(), 2u) << "two spares left";
  d.give_back(kBase + 64 * kPage, taken);
  ahead.drop();
  EXPECT_TRUE(d.live.empty());
}

TEST(MapAhead, AFailedRunLeavesNothingAndTheCallerMakesItsOwn) {
  for (int failing : {0, 1, 2}) {  // create, map, access
    FakeDriver d;
    d.fail_create_after = failing == 0 ? 3 : -1;
    d.fail_map_at = failing == 1 ? kBase + 2 * kPage : 0;
    d.fail_access = failing == 2;
    MapAhead ahead(d, kPage, kNeverIdle);
    ahead.prepare(kBase, 6 * kPage);
    EXPECT_TRUE(ahead.take(kBase, 6).empty());
    EXPECT_TRUE(d.live.empty());
    EXPECT_TRUE(d.mapped.empty());
    EXPECT_EQ(ahead.pages_made(), 0u);
  }
}

TEST(MapAhead, DropAndTheEndGiveEveryWaitingPageBack) {
  FakeDriver d;
  {
    MapAhead ahead(d, kPage, kNeverIdle);
    ahead.prepare(kBase, 5 * kPage);
    ahead.drop();
    EXPECT_TRUE(d.live.empty());
    ahead.prepare(kBase, 5 * kPage);  // and again, left for the destructor while the worker may be busy
  }
  EXPECT_TRUE(d.live.empty());
  EXPECT_TRUE(d.mapped.empty());
}

// Polls (up to 5 s) until `done` holds.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

TEST(MapAhead, PagesLeftIdleGoBackOnTheWorkerAndLaterRunsAreMadeAgain) {
  FakeDriver d;
  MapAhead ahead(d, kPage, std::chrono::milliseconds(50));
  ahead.prepare(kBase, 4 * kPage);
  ahead.clear(kBase, kPage);  // one spare, three waiting (or all given back already: the worker's choice)
  ASSERT_TRUE(eventually([&] { return ahead.pages_held() == 0; })) << ahead.pages_held();
  EXPECT_EQ(ahead.held(), 0u);
  {
    std::lock_guard lock(d.m);
    EXPECT_TRUE(d.live.empty());
    EXPECT_TRUE(d.mapped.empty());
  }
  EXPECT_TRUE(ahead.take(kBase + kPage, 3).empty());
  ahead.prepare(kBase + 4 * kPage, 2 * kPage);  // growth again: a run is made, then idles away too
  EXPECT_TRUE(eventually([&] { return ahead.pages_made() == 6; })) << ahead.pages_made();
  EXPECT_TRUE(eventually([&] { return ahead.pages_held() == 0; })) << ahead.pages_held();
  EXPECT_EQ(ahead.pages_held_peak(), 4u);
  std::lock_guard lock(d.m);
  EXPECT_TRUE(d.live.empty());
  EXPECT_TRUE(d.mapped.empty());
}

TEST(MapAhead, AForkedChildNeitherWaitsForNorTouchesItsParentsWorker) {
  FakeDriver d;
  d.delay_us = 20000;  // the run is under way when the child is made
  MapAhead ahead(d, kPage, kNeverIdle);
  ahead.prepare(kBase, 4 * kPage);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    bool ok = ahead.take(kBase, 4).empty();  // the child's copy: nothing, at once
    ahead.prepare(kBase + 100 * kPage, kPage);
    ahead.drop();
    ok = ok && std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(50);
    _exit(ok ? 0 : 1);  // the destructor is not run here; see ForkedChildDestroys below
  }
  int status = 0;
  ASSERT_TRUE(testing::wait_child(pid, &status)) << "the forked child hung";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ahead.take(kBase, 4).size(), 4u);
}

TEST(MapAhead, AForkedChildDestroysItsCopyWithoutJoining) {
  FakeDriver d;
  d.delay_us = 20000;
  auto* ahead = new MapAhead(d, kPage);
  ahead->prepare(kBase, 4 * kPage);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    delete ahead;  // must return: the worker does not exist in the child
    _exit(0);
  }
  int status = 0;
  ASSERT_TRUE(testing::wait_child(pid, &status)) << "the forked child hung";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(ahead->waiting(), 4u);
  delete ahead;
  EXPECT_TRUE(d.live.empty());
}

}  // namespace
}  // namespace gpumem
