// The monitor Sampler against the NVML test double: one sample holds every GPU's values, a lost GPU
// is an error on that GPU only, processes from both NVML lists merge, identity is read once.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <gpumem/monitor.hpp>

#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::monitor;

namespace {
Sampler& two_gpus() {
  static Sampler* s = [] {
    gpumem::testing::use_fake_nvml("current", gpumem::testing::write_scenario("sampler", R"(
gpu name="NVIDIA H100 80GB HBM3" total_mib=81559 reserved_mib=512 used_mib=20480 util_gpu=97 util_mem=41 power_mw=412345 temp=61 clk_gr=1755 limit_mw=700000
gpu name="Tesla T4" fan=na power_mw=na pstate=32
gpu lost=1
proc gpu=0 pid=11 used_mib=100
proc gpu=0 pid=11 used_mib=100 type=graphics
proc gpu=0 pid=12 used_mib=na
)"));
    return new Sampler(SamplerOptions{});
  }();
  return *s;
}
}  // namespace

TEST(Sampler, ReadsEveryGpuOnceAndKeepsFailuresPerGpu) {
  SampleSet set = two_gpus().sample();
  ASSERT_EQ(set.gpus.size(), 3u);
  const GpuSample& a = set.gpus[0];
  EXPECT_EQ(a.name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(a.memory_used, 20480ull << 20);
  EXPECT_EQ(a.memory_reserved, 512ull << 20);
  EXPECT_EQ(a.util_gpu, 97u);
  EXPECT_EQ(a.power_mw, 412345u);
  EXPECT_EQ(a.power_limit_mw, 700000u);
  EXPECT_EQ(a.clock_graphics_mhz, 1755u);
  ASSERT_TRUE(a.processes);
  ASSERT_EQ(a.processes->size(), 2u);
  EXPECT_TRUE((*a.processes)[0].compute && (*a.processes)[0].graphics);  // one context, both lists
  EXPECT_FALSE((*a.processes)[1].used_bytes);
  const GpuSample& b = set.gpus[1];
  EXPECT_TRUE(b.error.empty());
  EXPECT_FALSE(b.fan_percent);
  EXPECT_FALSE(b.power_mw);
  EXPECT_FALSE(b.pstate);  // 32 is NVML's "unknown"
  EXPECT_EQ(set.gpus[2].error, "GPU is lost");
  EXPECT_FALSE(set.gpus[2].memory_total);
}

TEST(Sampler, AFieldTheGpuRefusesIsNotAskedAgain) {
  two_gpus().sample();  // the T4 refuses the fan (fan=na); the H100 double has no fan either (default na)
  void* fake = dlopen(gpumem::testing::fake_nvml_path().c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(fake, nullptr);
  auto fan_calls = reinterpret_cast<int (*)()>(dlsym(fake, "gpumem_fake_nvml_fan_calls"));
  ASSERT_NE(fan_calls, nullptr);
  const int before = fan_calls();
  SampleSet later = two_gpus().sample();
  EXPECT_EQ(fan_calls(), before);
  EXPECT_FALSE(later.gpus[1].fan_percent);
  EXPECT_EQ(later.gpus[0].power_mw, 412345u);  // answered fields are still read every sample
  dlclose(fake);
}

TEST(Sampler, IdentityStaysAcrossSamples) {
  auto first = two_gpus().sample();
  auto second = two_gpus().sample();
  EXPECT_EQ(first.gpus[0].uuid, second.gpus[0].uuid);
  EXPECT_EQ(second.gpus[1].name, "Tesla T4");
  EXPECT_EQ(two_gpus().indices(), (std::vector<unsigned>{0, 1, 2}));
}
