#include <gtest/gtest.h>

#include <stdexcept>

#include "gpumem/limits.hpp"
#include "gpumem/trace.hpp"

namespace gpumem {
namespace {

TEST(ParseSize, PlainBytesAndUnits) {
  EXPECT_EQ(parse_size("0"), 0u);
  EXPECT_EQ(parse_size("4096"), 4096u);
  EXPECT_EQ(parse_size("512B"), 512u);
  EXPECT_EQ(parse_size("16GiB"), 16ull << 30);
  EXPECT_EQ(parse_size("16gib"), 16ull << 30);
  EXPECT_EQ(parse_size("16G"), 16ull << 30);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("1KiB"), 1024u);
  EXPECT_EQ(parse_size("2TiB"), 2ull << 40);
  EXPECT_EQ(parse_size("1.5GB"), 1500000000u);
  EXPECT_EQ(parse_size("1.5GiB"), 1610612736u);
  EXPECT_EQ(parse_size("80 GB"), 80000000000u);
  EXPECT_EQ(parse_size(" 3kb "), 3000u);
  EXPECT_EQ(parse_size("0.5KiB"), 512u);
  EXPECT_EQ(parse_size(".5KiB"), 512u);
  EXPECT_EQ(parse_size("1.1KiB"), 1126u);  // rounded down
  EXPECT_EQ(parse_size("18446744073709551615"), UINT64_MAX);
}

TEST(ParseSize, RejectsBadInput) {
  for (const char* bad : {"", "  ", "GiB", "-1", "-1GiB", "12 parsecs", "1.5.5GiB", "1e9", "0x100", "16 GiB extra",
                          "18446744073709551616", "17179869184GiB", "99999999999999999999999999999999", ".",
                          "1.5", "0.5B", "0.0000001KiB"}) {  // a byte count is whole; nothing is not "0.5B"
    EXPECT_THROW(parse_size(bad), std::invalid_argument) << bad;
  }
  try {
    parse_size("12 parsecs");
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "invalid size \"12 parsecs\": unknown unit \"parsecs\" (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)");
  }
}

// `gpumem limit` and top's limit prompt read the same text the same way.
TEST(ParseLimitAmount, FractionsHaveAPointSizesAUnitOrAreWhole) {
  EXPECT_TRUE(parse_limit_amount("0.5").fraction);
  EXPECT_DOUBLE_EQ(parse_limit_amount(" 0.5 ").share, 0.5);
  EXPECT_TRUE(parse_limit_amount("1.0").fraction);
  EXPECT_FALSE(parse_limit_amount("8GiB").fraction);
  EXPECT_EQ(parse_limit_amount("8GiB").bytes, 8ull << 30);
  EXPECT_EQ(parse_limit_amount("0").bytes, 0u);  // no limit
  EXPECT_EQ(parse_limit_amount("none").bytes, 0u);  // spelled as run's --limit none
  EXPECT_EQ(parse_limit_amount("NONE").bytes, 0u);  // in any case, as units
  EXPECT_EQ(parse_limit("None"), 0u);
  EXPECT_FALSE(means_no_limit("nonE0"));
  EXPECT_FALSE(parse_limit_amount("none").fraction);
  for (const char* bad : {"1", "1.5", "0.0", "0.00001", "0.5B", "2MB", "16777215TiB", "half", ""})
    EXPECT_THROW(parse_limit_amount(bad), std::invalid_argument) << bad;
}

}  // namespace
}  // namespace gpumem
