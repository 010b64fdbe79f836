// libgpumem_monitor.so (include/gpumem/gpumem_monitor.h) loaded with dlopen, as ctypes loads it: the sample
// document against the NVML test double, statuses and sentences, NVML kept open until reset, threads.
#include <dlfcn.h>
#include <gpumem/gpumem_monitor.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::testing;

namespace {

struct Api {
  void* handle = nullptr;
  int (*abi_version)() = nullptr;
  int (*sample_json)(int, char**, size_t*) = nullptr;
  void (*free_text)(char*) = nullptr;
  void (*reset)() = nullptr;
};

const Api& api() {
  static Api a = [] {
    Api x;
    x.handle = dlopen((std::string(GPUMEM_BINARY_DIR) + "/libgpumem_monitor.so").c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!x.handle) return x;
    x.abi_version = reinterpret_cast<int (*)()>(dlsym(x.handle, "gpumem_monitor_abi_version"));
    x.sample_json = reinterpret_cast<int (*)(int, char**, size_t*)>(dlsym(x.handle, "gpumem_monitor_sample_json"));
    x.free_text = reinterpret_cast<void (*)(char*)>(dlsym(x.handle, "gpumem_monitor_free"));
    x.reset = reinterpret_cast<void (*)()>(dlsym(x.handle, "gpumem_monitor_reset"));
    return x;
  }();
  return a;
}

struct Result {
  int status;
  std::string text;
};

Result sample(int flags) {
  char* out = nullptr;
  size_t len = 12345;
  int status = api().sample_json(flags, &out, &len);
  Result r{status, out ? std::string(out, len) : std::string("<null>")};
  if (out) {
    EXPECT_EQ(std::strlen(out), len);
  }
  api().free_text(out);
  return r;
}

nlohmann::json sample_doc(int flags) {
  Result r = sample(flags);
  EXPECT_EQ(r.status, GPUMEM_MONITOR_OK) << r.text;
  return r.status == GPUMEM_MONITOR_OK ? nlohmann::json::parse(r.text) : nlohmann::json();
}

std::string scenario_text(const std::string& name) {
  std::ifstream in(std::string(GPUMEM_SOURCE_DIR) + "/tests/monitor/scenarios/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class MonitorCApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(api().handle, nullptr) << dlerror();
    ASSERT_TRUE(api().abi_version && api().sample_json && api().free_text && api().reset);
    setenv("GPUMEM_DEV_DIR", "/nonexistent", 1);
    use("two_gpus.txt");
  }
  void TearDown() override { api().reset(); }
  // A fresh NVML over this scenario (the double reads it at nvmlInit).
  void use(const std::string& name) {
    use_fake_nvml("current", write_scenario(name, scenario_text(name)));
    api().reset();
  }
};

TEST_F(MonitorCApi, OnlyTheCAbiIsExported) {
  EXPECT_EQ(api().abi_version(), GPUMEM_MONITOR_ABI_VERSION);
  // Both are in the library (nm lists them), local: a C++ user of gpumem's other libraries cannot clash.
  EXPECT_EQ(dlsym(api().handle, "_ZN6gpumem7monitor7Sampler6sampleEv"), nullptr);  // Sampler::sample()
  EXPECT_EQ(dlsym(api().handle, "_ZN6gpumem3tui11sample_jsonB5cxx11ERKNS0_7TopDataE"), nullptr);
}

TEST_F(MonitorCApi, SampleHasEveryGpuInBytesWithProcessesAndLostGpus) {
  auto j = sample_doc(GPUMEM_MONITOR_PROCESSES);
  EXPECT_EQ(j["schema"], 1);
  ASSERT_EQ(j["gpus"].size(), 3u);
  const auto& g = j["gpus"][0];
  EXPECT_EQ(g["name"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(g["bus_id"], "00000000:18:00.0");
  EXPECT_EQ(g["memory_used_bytes"], 20480ull << 20);
  EXPECT_EQ(g["memory_reserved_bytes"], 512ull << 20);
  EXPECT_EQ(g["power_mw"], 412345);
  EXPECT_EQ(g["pstate"], "P0");
  EXPECT_TRUE(g["fan_percent"].is_null());  // the double's H100 has no fan
  ASSERT_EQ(g["processes"].size(), 2u);
  EXPECT_EQ(g["processes"][0]["pid"], 4242);
  EXPECT_EQ(g["processes"][0]["used_memory_bytes"], 12288ull << 20);
  EXPECT_EQ(g["processes"][0]["kind"], "gone");  // no such process here
  EXPECT_TRUE(g["processes"][0]["allocated_bytes"].is_null());
  EXPECT_EQ(j["gpus"][1]["processes"].size(), 0u);
  EXPECT_EQ(j["gpus"][2]["error"], "GPU is lost");
  EXPECT_TRUE(j["gpus"][2]["memory_used_bytes"].is_null());

  auto without = sample_doc(0);  // processes not asked for: null, not an empty list
  EXPECT_TRUE(without["gpus"][0]["processes"].is_null());
  EXPECT_EQ(without["gpus"][0]["memory_used_bytes"], 20480ull << 20);
}

TEST_F(MonitorCApi, ExtrasOnlyWhenAskedFor) {
  const auto plain = sample_doc(GPUMEM_MONITOR_PROCESSES)["gpus"][0];
  for (const char* key : {"memory_temperature_c", "energy_mj", "pcie_replays", "encoder_percent", "bar1_used_bytes",
                          "ecc_corrected", "ecc_uncorrected"})
    EXPECT_TRUE(plain[key].is_null()) << key;
  const auto extras = sample_doc(GPUMEM_MONITOR_PROCESSES | GPUMEM_MONITOR_EXTRAS)["gpus"][0];
  EXPECT_EQ(extras["memory_temperature_c"], 70);
  EXPECT_EQ(extras["bar1_used_bytes"], 1048576);
  EXPECT_EQ(extras["ecc_uncorrected"], 0);
  EXPECT_EQ(extras["memory_used_bytes"], plain["memory_used_bytes"]);
}

TEST_F(MonitorCApi, UnsupportedFieldsAreNull) {
  use("unsupported.txt");
  auto j = sample_doc(GPUMEM_MONITOR_PROCESSES);
  const auto& t4 = j["gpus"][0];
  EXPECT_EQ(t4["name"], "Tesla T4");
  EXPECT_TRUE(t4["utilization_gpu_percent"].is_null());
  EXPECT_TRUE(t4["power_mw"].is_null());
  EXPECT_TRUE(t4["power_limit_mw"].is_null());
}

TEST_F(MonitorCApi, NoNvmlIsItsOwnStatusAndIsNotRemembered) {
  setenv("GPUMEM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  api().reset();
  Result r = sample(GPUMEM_MONITOR_PROCESSES);
  EXPECT_EQ(r.status, GPUMEM_MONITOR_NO_DEVICE);
  EXPECT_NE(r.text.find("NVML (/nonexistent/libnvidia-ml.so.1) could not be loaded"), std::string::npos) << r.text;
  setenv("GPUMEM_NVML_LIBRARY", fake_nvml_path().c_str(), 1);
  EXPECT_EQ(sample(GPUMEM_MONITOR_PROCESSES).status, GPUMEM_MONITOR_OK);
}

TEST_F(MonitorCApi, BadArgumentsGetStatusTwo) {
  size_t len = 0;
  char* out = nullptr;
  EXPECT_EQ(api().sample_json(0, nullptr, &len), GPUMEM_MONITOR_BAD_ARGUMENT);
  EXPECT_EQ(api().sample_json(0, &out, nullptr), GPUMEM_MONITOR_BAD_ARGUMENT);
  Result r = sample(64);
  EXPECT_EQ(r.status, GPUMEM_MONITOR_BAD_ARGUMENT);
  EXPECT_EQ(r.text, "gpumem_monitor_sample_json: unknown flags 64.");
  api().free_text(nullptr);  // as free(NULL)
}

TEST_F(MonitorCApi, NvmlStaysOpenBetweenSamplesUntilReset) {
  std::string text = scenario_text("two_gpus.txt");
  std::string path = write_scenario("kept_open.txt", text);
  use_fake_nvml("current", path);
  api().reset();
  EXPECT_EQ(sample_doc(0)["gpus"][0]["memory_used_bytes"], 20480ull << 20);
  std::ofstream(path) << text.replace(text.find("used_mib=20480"), 14, "used_mib=1024");
  // Same flags and other flags alike: one NVML, opened once (the double would read the new file at init).
  EXPECT_EQ(sample_doc(0)["gpus"][0]["memory_used_bytes"], 20480ull << 20);
  EXPECT_EQ(sample_doc(GPUMEM_MONITOR_PROCESSES)["gpus"][0]["memory_used_bytes"], 20480ull << 20);
  api().reset();
  EXPECT_EQ(sample_doc(0)["gpus"][0]["memory_used_bytes"], 1024ull << 20);
}

TEST_F(MonitorCApi, ThreadsSampleTogether) {
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &failures] {
      for (int i = 0; i < 25; ++i) {
        char* out = nullptr;
        size_t len = 0;
        int flags = (t % 2) ? GPUMEM_MONITOR_PROCESSES : 0;
        if (api().sample_json(flags, &out, &len) != GPUMEM_MONITOR_OK ||
            nlohmann::json::parse(std::string(out, len))["gpus"].size() != 3)
          ++failures[t];
        api().free_text(out);
        if (t == 3 && i == 10) api().reset();  // a reset between other threads' samples
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

}  // namespace
