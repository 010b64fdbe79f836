// The full-size property test: 10^6 random operations on the sim backend against the reference model.
// Label "slow": the ASan build skips it and runs property_test.cpp's smaller runs.
#include <gtest/gtest.h>

#include "engine/property_driver.hpp"

namespace gpumem::testing_model {
namespace {

TEST(EnginePropertySlow, SimMillionOperations) {
  PropertyConfig c;
  c.ops = 1000000;
  c.streams = 6;
  c.seed = 42;
  c.invariants_every = 50000;
  PropertyResult r = run_property(c);
  EXPECT_EQ(r.failure, "");
  EXPECT_GT(r.allocations, 250000u);
  EXPECT_GT(r.pending_seen, 1000u);
  EXPECT_GT(r.ooms, 0u);
}

}  // namespace
}  // namespace gpumem::testing_model
