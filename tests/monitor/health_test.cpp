// Health readings of the monitor Sampler against the NVML test double: power/thermal violation rates
// between samples, JPEG/OFA utilization, %SM per process (newest sample wins, idle processes 0), the
// last XID from an event set polled without blocking, remapped rows, and an old driver without those entry points.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <gpumem/monitor.hpp>
#include <thread>

#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::monitor;

namespace {

std::string health_scenario() { return std::string(GPUMEM_SOURCE_DIR) + "/tests/monitor/scenarios/health.txt"; }

SamplerOptions all_health() {
  SamplerOptions o;
  o.process_utilization = true;
  o.violations = true;
  o.xid = true;
  o.remapped_rows = true;
  return o;
}

const ProcessSample* process(const GpuSample& g, unsigned pid) {
  for (const ProcessSample& p : *g.processes)
    if (p.pid == pid) return &p;
  return nullptr;
}

}  // namespace

TEST(HealthSampler, ViolationsEnginesProcessUtilizationAndXid) {
  gpumem::testing::use_fake_nvml("current", health_scenario());
  Sampler sampler(all_health());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  SampleSet set = sampler.sample();
  ASSERT_EQ(set.gpus.size(), 3u);
  const GpuSample& a = set.gpus[0];
  EXPECT_EQ(a.power_violation_percent, 50u);  // capped half of the time since the base reading
  EXPECT_EQ(a.thermal_violation, true);
  EXPECT_EQ(a.jpg_percent, 3u);
  EXPECT_FALSE(a.ofa_percent);
  EXPECT_EQ(a.last_xid, 79ull);
  EXPECT_EQ(a.remapped_rows_correctable, 3u);
  EXPECT_EQ(a.remapped_rows_uncorrectable, 1u);
  EXPECT_EQ(a.row_remap_failure, false);
  ASSERT_TRUE(a.processes);
  EXPECT_EQ(process(a, 4242)->sm_percent, 42u);  // the newest of its two samples
  EXPECT_EQ(process(a, 4343)->sm_percent, 0u);   // no sample: idle
  const GpuSample& b = set.gpus[1];
  EXPECT_TRUE(b.error.empty());
  EXPECT_FALSE(b.power_violation_percent);
  EXPECT_FALSE(b.thermal_violation);
  EXPECT_FALSE(b.jpg_percent);
  EXPECT_FALSE(b.last_xid);  // cannot register for events: left out, not 0
  EXPECT_FALSE(b.remapped_rows_correctable);
  ASSERT_TRUE(b.processes);
  EXPECT_FALSE(process(b, 4444)->sm_percent);
  EXPECT_FALSE(set.gpus[2].last_xid);

  // A later XID replaces the value; a sample without events keeps it.
  void* lib = dlopen(gpumem::testing::fake_nvml_path("current").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_TRUE(lib);
  auto inject = reinterpret_cast<void (*)(unsigned, unsigned long long)>(dlsym(lib, "gpumem_fake_nvml_inject_xid"));
  ASSERT_TRUE(inject);
  inject(0, 31);
  EXPECT_EQ(sampler.sample().gpus[0].last_xid, 31ull);
  SampleSet later = sampler.sample();
  EXPECT_EQ(later.gpus[0].last_xid, 31ull);
  EXPECT_EQ(later.gpus[0].power_violation_percent, 50u);
  dlclose(lib);
}

TEST(HealthSampler, WithoutTheOptionsNothingExtraIsRead) {
  gpumem::testing::use_fake_nvml("current", health_scenario());
  Sampler sampler(SamplerOptions{});
  SampleSet set = sampler.sample();
  EXPECT_FALSE(set.gpus[0].power_violation_percent);
  EXPECT_FALSE(set.gpus[0].last_xid);
  EXPECT_FALSE(process(set.gpus[0], 4242)->sm_percent);
  EXPECT_EQ(set.gpus[0].jpg_percent, 3u);  // a plain reading, like the encoder's
}

TEST(HealthSampler, OldDriverWithoutTheEntryPointsStillSamples) {
  gpumem::testing::use_fake_nvml("old", health_scenario());
  Sampler sampler(all_health());
  SampleSet set = sampler.sample();
  ASSERT_EQ(set.gpus.size(), 3u);
  const GpuSample& a = set.gpus[0];
  EXPECT_TRUE(a.error.empty());
  EXPECT_EQ(a.memory_total, 81559ull << 20);  // the old driver answers what it has
  EXPECT_FALSE(a.jpg_percent);
  EXPECT_FALSE(a.ofa_percent);
  EXPECT_FALSE(a.last_xid);  // no event entry points
  EXPECT_FALSE(a.remapped_rows_correctable);  // nor the row remapper's
  EXPECT_EQ(a.power_violation_percent, 50u);  // violations are an old entry point
}
