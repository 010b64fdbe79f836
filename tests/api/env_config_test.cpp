// GPUMEM_* settings: malformed values give one sentence naming the variable.
#include <gtest/gtest.h>

#include <cstdlib>

#include "api/env_config.hpp"
#include "gpumem/errors.hpp"

namespace {

struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(n, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

TEST(EnvConfig, SizesAndFractions) {
  {
    ScopedEnv e("GPUMEM_TEST_SIZE", "1.5GiB");
    EXPECT_EQ(gpumem::api::env_size("GPUMEM_TEST_SIZE"), std::uint64_t(3) << 29);
  }
  EXPECT_FALSE(gpumem::api::env_size("GPUMEM_TEST_SIZE").has_value());
  {
    ScopedEnv e("GPUMEM_TEST_SIZE", "");
    EXPECT_FALSE(gpumem::api::env_size("GPUMEM_TEST_SIZE").has_value());
  }
  {
    ScopedEnv e("GPUMEM_TEST_FRACTION", "0.25");
    EXPECT_DOUBLE_EQ(*gpumem::api::env_fraction("GPUMEM_TEST_FRACTION"), 0.25);
  }
}

TEST(EnvConfig, MalformedValuesNameTheVariable) {
  for (const char* bad : {"12XB", "-1", "lots"}) {
    ScopedEnv e("GPUMEM_TEST_SIZE", bad);
    try {
      gpumem::api::env_size("GPUMEM_TEST_SIZE");
      FAIL() << bad;
    } catch (const gpumem::Error& err) {
      EXPECT_NE(std::string(err.what()).find("GPUMEM_TEST_SIZE"), std::string::npos) << err.what();
    }
  }
  for (const char* bad : {"0", "1.5", "half", "0.5x", "-0.1"}) {
    ScopedEnv e("GPUMEM_TEST_FRACTION", bad);
    EXPECT_THROW(gpumem::api::env_fraction("GPUMEM_TEST_FRACTION"), gpumem::Error) << bad;
  }
  // Fractional or sub-byte counts: "0.5B" read as 0 bytes meant "no limit" where `gpumem limit` took it.
  for (const char* bad : {"1.5", "0.5B", "0.0000001KiB"}) {
    ScopedEnv e("GPUMEM_TEST_SIZE", bad);
    EXPECT_THROW(gpumem::api::env_size("GPUMEM_TEST_SIZE"), gpumem::Error) << bad;
  }
  {
    ScopedEnv limit("GPUMEM_LIMIT", "2MiB"), fraction("GPUMEM_FRACTION", "0.5");
    try {
      gpumem::api::env_limit();
      FAIL() << "both caps set";
    } catch (const gpumem::Error& err) {
      EXPECT_NE(std::string(err.what()).find("exclude each other"), std::string::npos) << err.what();
    }
  }
  {
    ScopedEnv e("GPUMEM_BACKEND", "host");
    EXPECT_EQ(gpumem::api::env_backend(), "host");
  }
  EXPECT_EQ(gpumem::api::env_backend(), "cuda");
}

// GPUMEM_MAP_AHEAD, GPUMEM_CONTROL, GPUMEM_COOPERATIVE: 1/0, true/false, yes/no, on/off in any case;
// anything else is refused with the variable's name, never taken as on.
TEST(EnvConfig, SwitchesAreOnOrOffOrRefused) {
  for (const char* on : {"1", "true", "Yes", "ON"}) {
    ScopedEnv e("GPUMEM_TEST_SWITCH", on);
    EXPECT_TRUE(gpumem::api::env_switch("GPUMEM_TEST_SWITCH", false)) << on;
  }
  for (const char* off : {"0", "FALSE", "no", "Off"}) {
    ScopedEnv e("GPUMEM_TEST_SWITCH", off);
    EXPECT_FALSE(gpumem::api::env_switch("GPUMEM_TEST_SWITCH", true)) << off;
  }
  EXPECT_TRUE(gpumem::api::env_switch("GPUMEM_TEST_SWITCH", true));  // unset: the default
  for (const char* bad : {"2", "o", "offf", "yes please", " 1", "-1"}) {
    ScopedEnv e("GPUMEM_TEST_SWITCH", bad);
    EXPECT_THROW(gpumem::api::env_switch("GPUMEM_TEST_SWITCH", true), gpumem::Error) << bad;
  }
  EXPECT_NO_THROW(gpumem::api::env_check_switches());
  for (const char* name : {"GPUMEM_MAP_AHEAD", "GPUMEM_CONTROL", "GPUMEM_COOPERATIVE"}) {
    ScopedEnv e(name, "maybe");
    try {
      gpumem::api::env_check_switches();
      FAIL() << name;
    } catch (const gpumem::Error& err) {
      EXPECT_NE(std::string(err.what()).find(std::string(name) + "='maybe'"), std::string::npos) << err.what();
    }
  }
}

}  // namespace
