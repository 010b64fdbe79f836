// Random-operation property tests against the reference model (property_driver.hpp). The 10^6-step run
// is property_slow_test.cpp (label "slow": the sanitizer builds run these smaller ones instead).
#include <gtest/gtest.h>

#include "engine/property_driver.hpp"

namespace gpumem::testing_model {
namespace {

void expect_clean_run(const PropertyConfig& c) {
  PropertyResult r = run_property(c);
  EXPECT_EQ(r.failure, "");
  // The run must have exercised what it claims to, or it proves nothing.
  EXPECT_GT(r.allocations, c.ops / 4);
  EXPECT_GT(r.frees, c.ops / 5);
  if (c.streams > 1) {
    EXPECT_GT(r.pending_seen, 0u) << "no free ever waited for another stream";
  }
  if (c.limits) {
    EXPECT_GT(r.ooms, 0u) << "the limits never made an allocation fail";
  }
  EXPECT_GT(r.empty_caches, 0u);
  EXPECT_GT(r.peak_resets, 0u);
  ::testing::Test::RecordProperty("allocations", std::to_string(r.allocations));
  ::testing::Test::RecordProperty("ooms", std::to_string(r.ooms));
}

TEST(EngineProperty, SimFourStreams) {
  PropertyConfig c;
  c.ops = 100000;
  c.seed = 7;
  expect_clean_run(c);
}

// Large chunks in large pages (4 MiB here, so requests from 32 MiB get them): every split, lend and
// release must keep to whole pages (the sim refuses a map that splits one; the invariants check the rest).
TEST(EngineProperty, SimLargePagesFourStreams) {
  PropertyConfig c;
  c.ops = 100000;
  c.large_page = std::size_t(4) << 20;
  c.max_bytes = std::size_t(96) << 20;
  c.seed = 23;
  expect_clean_run(c);
}

// With one stream every peak is exact, not just bounded by the per-stream sum.
TEST(EngineProperty, SimOneStreamExactPeaks) {
  PropertyConfig c;
  c.ops = 60000;
  c.streams = 1;
  c.seed = 11;
  expect_clean_run(c);
}

TEST(EngineProperty, SimWithoutVirtualMemory) {
  PropertyConfig c;
  c.backend = PropertyConfig::BackendKind::sim_plain;
  c.ops = 40000;
  c.slots = 256;
  c.seed = 13;
  expect_clean_run(c);
}

TEST(EngineProperty, SimManySmallBlocks) {
  PropertyConfig c;
  c.ops = 60000;
  c.slots = 4096;
  c.max_bytes = 64 << 10;
  c.streams = 3;
  c.seed = 17;
  expect_clean_run(c);
}

// Real memory: every live block holds a pattern (from its id) checked after every step, so two live
// blocks sharing a physical page, or a page reused while another stream still uses it, shows at once.
TEST(EngineProperty, HostDataSurvivesEveryStep) {
  PropertyConfig c;
  c.backend = PropertyConfig::BackendKind::host;
  c.ops = 5000;
  c.slots = 32;
  c.streams = 3;
  c.max_bytes = 256 << 10;
  c.large_share = 0.03;
  c.seed = 19;
  c.invariants_every = 500;
  c.rare_every = 250;
  expect_clean_run(c);
}

}  // namespace
}  // namespace gpumem::testing_model
