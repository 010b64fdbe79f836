// The NVML layer against the test double: versioned entry points, record strides, fallbacks, and
// per-field failures that never spoil the other fields.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "nvml/fake_nvml_env.hpp"
#include "nvml/nvml.hpp"
#include "nvml/pcie_sampler.hpp"


using namespace gpumem::nvml;
using gpumem::testing::use_fake_nvml;
using gpumem::testing::write_scenario;

namespace {

const char* kTwoGpus =
    "driver 550.54.15\n"
    "cuda 12040\n"
    "gpu name=\"NVIDIA H100 80GB HBM3\" bus=00000000:18:00.0 total_mib=81559 reserved_mib=512 used_mib=1000 fan=na\n"
    "gpu name=\"NVIDIA H100 80GB HBM3\" bus=00000000:2A:00.0 lost=1\n"
    "proc gpu=0 pid=101 used_mib=400 name=python3\n"
    "proc gpu=0 pid=202 used_mib=500 name=python3\n"
    "proc gpu=0 pid=303 used_mib=na\n"
    "proc gpu=0 pid=404 used_mib=16 type=graphics\n";

std::shared_ptr<Nvml> open_fake(const std::string& variant, const std::string& scenario) {
  use_fake_nvml(variant, write_scenario(variant + "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name(), scenario));
  return Nvml::open();
}

void expect_processes(const Nvml& nvml) {
  auto d = nvml.device(0);
  ASSERT_TRUE(d);
  auto procs = nvml.compute_processes(*d);
  ASSERT_TRUE(procs) << nvml.error_string(procs.status);
  ASSERT_EQ(procs->size(), 3u);
  EXPECT_EQ((*procs)[0].pid, 101u);
  EXPECT_EQ((*procs)[0].used_bytes, 400ull << 20);
  EXPECT_EQ((*procs)[1].pid, 202u);
  EXPECT_EQ((*procs)[1].used_bytes, 500ull << 20);
  EXPECT_EQ((*procs)[2].pid, 303u);
  EXPECT_FALSE((*procs)[2].used_bytes.has_value());
  auto gfx = nvml.graphics_processes(*d);
  ASSERT_TRUE(gfx);
  ASSERT_EQ(gfx->size(), 1u);
  EXPECT_EQ((*gfx)[0].pid, 404u);
  EXPECT_TRUE((*gfx)[0].graphics);
}

}  // namespace

TEST(NvmlLibrary, MissingLibraryIsOneClearError) {
  setenv("GPUMEM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  try {
    Nvml::open();
    FAIL() << "expected NvmlUnavailableError";
  } catch (const NvmlUnavailableError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/libnvidia-ml.so.1"), std::string::npos);
  }
}

TEST(NvmlLibrary, InitFailureIsUnavailable) {
  EXPECT_THROW(open_fake("current", "init_error 9\n"), NvmlUnavailableError);
}

TEST(NvmlLibrary, CurrentDriverUsesV3WithV2Records) {
  auto nvml = open_fake("current", kTwoGpus);
  EXPECT_EQ(nvml->library().fn().process_api_version, 3);
  EXPECT_EQ(nvml->library().fn().process_record_size, sizeof(gpumem::nvml::abi::ProcessInfo_v2));
  expect_processes(*nvml);
}

TEST(NvmlLibrary, CcDriverUsesV3With32ByteRecords) {
  auto nvml = open_fake("cc", kTwoGpus);
  EXPECT_EQ(nvml->library().fn().process_api_version, 3);
  EXPECT_EQ(nvml->library().fn().process_record_size, sizeof(gpumem::nvml::abi::ProcessInfo_v3cc));
  expect_processes(*nvml);
}

TEST(NvmlLibrary, OldDriverFallsBackToV1Everywhere) {
  auto nvml = open_fake("old", kTwoGpus);
  EXPECT_EQ(nvml->library().fn().process_api_version, 1);
  EXPECT_EQ(nvml->library().fn().process_record_size, sizeof(gpumem::nvml::abi::ProcessInfo_v1));
  expect_processes(*nvml);
  auto d = *nvml->device(0);
  auto mem = nvml->memory(d);
  ASSERT_TRUE(mem);
  EXPECT_FALSE(mem->reserved.has_value());
  EXPECT_EQ(mem->used, 1512ull << 20);  // v1 counts reserved memory as used
  EXPECT_EQ(nvml->pci_bus_id(d).value, "00000000:18:00.0");
  EXPECT_EQ(nvml->cuda_driver_version().value, 12040);
}

TEST(NvmlLibrary, MemoryV2KeepsReservedApart) {
  auto nvml = open_fake("current", kTwoGpus);
  auto mem = nvml->memory(*nvml->device(0));
  ASSERT_TRUE(mem);
  EXPECT_EQ(mem->reserved, 512ull << 20);
  EXPECT_EQ(mem->used, 1000ull << 20);
  EXPECT_EQ(mem->total, 81559ull << 20);
  EXPECT_EQ(mem->free, (81559ull - 512 - 1000) << 20);
}

TEST(NvmlLibrary, MemoryV2VersionMismatchFallsBackToV1) {
  auto nvml = open_fake("current", "gpu total_mib=1000 reserved_mib=10 used_mib=100 memory_v2=mismatch\n");
  auto mem = nvml->memory(*nvml->device(0));
  ASSERT_TRUE(mem);
  EXPECT_FALSE(mem->reserved.has_value());
  EXPECT_EQ(mem->used, 110ull << 20);
}

TEST(NvmlLibrary, ProcessListThatGrowsIsRetried) {
  auto nvml = open_fake("current", std::string("insufficient_size_once 1\n") + kTwoGpus);
  expect_processes(*nvml);
}

TEST(NvmlLibrary, FailuresStayPerField) {
  auto nvml = open_fake("current", kTwoGpus);
  auto d0 = *nvml->device(0);
  auto fan = nvml->fan_percent(d0);
  EXPECT_FALSE(fan);
  EXPECT_TRUE(fan.not_supported());
  EXPECT_TRUE(nvml->temperature(d0));
  auto d1 = nvml->device(1);
  ASSERT_TRUE(d1);
  auto name = nvml->name(*d1);
  EXPECT_EQ(name.status, gpumem::nvml::abi::kErrorGpuIsLost);
  EXPECT_EQ(nvml->error_string(name.status), "GPU is lost");
  EXPECT_EQ(nvml->compute_processes(*d1).status, gpumem::nvml::abi::kErrorGpuIsLost);
  EXPECT_EQ(nvml->driver_version().value, "550.54.15");
}

TEST(NvmlLibrary, MemoryTemperatureThroughFieldValues) {
  auto nvml = open_fake("current", "gpu mtemp=51\ngpu mtemp=na\n");
  EXPECT_EQ(nvml->memory_temperature(*nvml->device(0)).value, 51u);
  EXPECT_TRUE(nvml->memory_temperature(*nvml->device(1)).not_supported());
}

// A blocked PCIe call must not hold up anything else: while the double holds every throughput call,
// other reads and latest() still answer.
TEST(NvmlLibrary, HealthEntryPointsAreOptional) {
  auto nvml = open_fake("current", "gpu retired_sbe=2 retired_dbe=na remap_corr=5\ngpu lost=1\n");
  const Functions& f = nvml->library().fn();
  EXPECT_TRUE(f.jpg_utilization && f.ofa_utilization && f.remapped_rows && f.event_set_wait && f.process_utilization);
  auto d0 = *nvml->device(0);
  EXPECT_EQ(nvml->retired_pages(d0, gpumem::nvml::abi::kRetiredMultipleSbe).value, 2u);  // the count-only call
  EXPECT_TRUE(nvml->retired_pages(d0, gpumem::nvml::abi::kRetiredDbe).not_supported());
  EXPECT_EQ(nvml->retired_pages_pending(d0).value, false);
  ASSERT_TRUE(nvml->remapped_rows(d0));
  EXPECT_EQ(nvml->remapped_rows(d0)->correctable, 5u);
  EXPECT_TRUE(nvml->process_utilization(d0, 0)->empty());  // no samples: Not Found is an empty list
  EXPECT_EQ(nvml->violation(*nvml->device(1), gpumem::nvml::abi::kPerfPolicyPower).status, gpumem::nvml::abi::kErrorGpuIsLost);
  // An old driver: the newer entry points are absent and read as not supported, nothing else breaks.
  auto old = open_fake("old", "gpu jpg=5\n");
  const Functions& g = old->library().fn();
  EXPECT_FALSE(g.jpg_utilization || g.ofa_utilization || g.remapped_rows || g.event_set_create || g.event_set_wait);
  EXPECT_TRUE(old->jpg_percent(*old->device(0)).not_supported());
  EXPECT_TRUE(old->remapped_rows(*old->device(0)).not_supported());
}

TEST(PcieSampler, BlockedThroughputCallsDelayNothing) {
  auto nvml = open_fake("current", "gpu pcie_rx=2048 pcie_tx=1024\n");
  void* h = dlopen(gpumem::testing::fake_nvml_path("current").c_str(), RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(h, nullptr);
  auto block = reinterpret_cast<void (*)(int)>(dlsym(h, "gpumem_fake_nvml_block_pcie"));
  auto inflight = reinterpret_cast<int (*)()>(dlsym(h, "gpumem_fake_nvml_pcie_inflight"));
  ASSERT_TRUE(block && inflight);
  block(1);
  {
    PcieSampler sampler(nvml, {*nvml->device(0)});
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    auto before_deadline = [&] { return std::chrono::steady_clock::now() < deadline; };
    while (inflight() == 0 && before_deadline()) std::this_thread::yield();  // the sampler is now stuck inside NVML
    if (inflight() == 0) {
      block(0);  // so the sampler's thread can be joined
      FAIL() << "the sampler never asked NVML for PCIe throughput";
    }
    EXPECT_FALSE(sampler.latest(0).rx_kbps.has_value());
    EXPECT_TRUE(nvml->temperature(*nvml->device(0)));
    block(0);
    while (sampler.rounds() == 0 && before_deadline()) std::this_thread::yield();
    ASSERT_GT(sampler.rounds(), 0u) << "the sampler never finished a round once NVML answered";
    EXPECT_EQ(sampler.latest(0).rx_kbps, 2048u);
    EXPECT_EQ(sampler.latest(0).tx_kbps, 1024u);
  }
  dlclose(h);
}
