// Unit tests of the monitor logic that needs neither NVML nor child processes.
#include <signal.h>

#include <gtest/gtest.h>

#include "monitor/common.hpp"
#include "monitor/cuda_order.hpp"
#include "monitor/dmon.hpp"
#include "monitor/kill.hpp"
#include "monitor/query.hpp"

using namespace gpumem::monitor;

namespace {
std::vector<CudaGpu> gpus() {
  return {{0, "GPU-aaaa-0", "00000000:18:00.0", "NVIDIA A100", std::pair{8, 0}},
          {1, "GPU-bbbb-1", "00000000:2A:00.0", "NVIDIA H100", std::pair{9, 0}},
          {2, "GPU-bbbc-2", "00000000:3B:00.0", "NVIDIA A100", std::pair{8, 0}}};
}
}  // namespace

TEST(CudaOrder, PciBusIdMatchesNvml) {
  auto m = cuda_order(gpus(), "PCI_BUS_ID", nullptr);
  EXPECT_EQ(m.visible, (std::vector<unsigned>{0, 1, 2}));
  EXPECT_FALSE(m.order_estimated);
}

TEST(CudaOrder, FastestFirstPutsNewestFirstAndSaysItIsAnEstimate) {
  auto m = cuda_order(gpus(), nullptr, nullptr);
  EXPECT_EQ(m.order, "FASTEST_FIRST");
  EXPECT_TRUE(m.order_estimated);
  EXPECT_EQ(m.enumeration, (std::vector<unsigned>{1, 0, 2}));
}

TEST(CudaOrder, VisibleDevicesIndicesAndUuidPrefixes) {
  auto m = cuda_order(gpus(), "PCI_BUS_ID", "2,GPU-bbbb");
  EXPECT_EQ(m.visible, (std::vector<unsigned>{2, 1}));
  EXPECT_TRUE(m.notes.empty());
}

TEST(CudaOrder, FirstInvalidEntryHidesTheRest) {
  auto m = cuda_order(gpus(), "PCI_BUS_ID", "1,7,0");
  EXPECT_EQ(m.visible, (std::vector<unsigned>{1}));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_EQ(m.notes[0], "CUDA_VISIBLE_DEVICES entry 1: there is no CUDA device 7; CUDA ignores it and every entry after it.");
  EXPECT_TRUE(cuda_order(gpus(), "PCI_BUS_ID", "").visible.empty());
  auto ambiguous = cuda_order(gpus(), "PCI_BUS_ID", "GPU-bbb");
  EXPECT_TRUE(ambiguous.visible.empty());
  EXPECT_NE(ambiguous.notes[0].find("ambiguous"), std::string::npos);
}

TEST(KillPolicy, RefusesInitSelfParentAndOtherUsers) {
  ProcInfo p;
  p.pid = 500;
  p.uid = 1001;
  p.user = "bob";
  EXPECT_FALSE(kill_refusal(p, 0, 10, 9).has_value());  // root may
  EXPECT_EQ(kill_refusal(p, 1000, 10, 9).value(),
            "refused: owned by user bob (only root may signal other users' processes)");
  p.uid = 1000;
  EXPECT_FALSE(kill_refusal(p, 1000, 10, 9).has_value());
  p.pid = 10;
  EXPECT_TRUE(kill_refusal(p, 0, 10, 9).has_value());
  p.pid = 9;
  EXPECT_TRUE(kill_refusal(p, 0, 10, 9).has_value());
  p.pid = 1;
  EXPECT_TRUE(kill_refusal(p, 0, 10, 9).has_value());
}

TEST(KillPolicy, SignalNames) {
  EXPECT_EQ(parse_signal("TERM"), SIGTERM);
  EXPECT_EQ(parse_signal("sigkill"), SIGKILL);
  EXPECT_EQ(parse_signal("2"), SIGINT);
  EXPECT_THROW(parse_signal("0"), UsageError);
  EXPECT_THROW(parse_signal("NOPE"), UsageError);
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  // Every name kill(1) takes, not only the common few (ALRM, TSTP, WINCH, ABRT were refused).
  for (auto [name, sig] : {std::pair{"ALRM", SIGALRM}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH}, {"SIGABRT", SIGABRT}, {"pwr", SIGPWR}})
    EXPECT_EQ(parse_signal(name), sig) << name;
  EXPECT_EQ(signal_name(SIGWINCH), "SIGWINCH");
}

TEST(QueryParse, FormatsAndFields) {
  auto f = parse_query_format("csv,noheader,nounits");
  EXPECT_FALSE(f.json);
  EXPECT_FALSE(f.header);
  EXPECT_FALSE(f.units);
  EXPECT_TRUE(parse_query_format("json").json);
  EXPECT_THROW(parse_query_format("noheader"), UsageError);
  EXPECT_THROW(parse_query_format("csv,bogus"), UsageError);
  EXPECT_EQ(parse_gpu_fields("clocks.sm, memory.used,gpu_name").fields.size(), 3u);
  try {
    parse_gpu_fields("index,foo.bar");
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(), "Field \"foo.bar\" is not a valid field to query.");
  }
  EXPECT_THROW(parse_app_fields("memory.used"), UsageError);
  EXPECT_EQ(parse_app_fields("pid,used_memory").fields.size(), 2u);
}

TEST(DmonParse, MetricGroups) {
  auto c = parse_dmon_metrics("ut");
  EXPECT_TRUE(c.util && c.pcie);
  EXPECT_FALSE(c.power || c.clocks || c.memory);
  EXPECT_THROW(parse_dmon_metrics("pz"), UsageError);
  EXPECT_THROW(parse_dmon_metrics(","), UsageError);
  EXPECT_TRUE(parse_dmon_metrics("p,u,c,m,e,t").ecc);
  // The largest reading the driver can give stays a number in W (it wrapped to 0 in 32 bits).
  SampleSet s;
  s.gpus.emplace_back();
  s.gpus[0].power_mw = 4294967295u;
  EXPECT_NE(dmon_lines(s, parse_dmon_metrics("p")).find("4294967"), std::string::npos) << dmon_lines(s, parse_dmon_metrics("p"));
  // nvidia-smi's columns per letter, in its layout.
  EXPECT_EQ(dmon_header(parse_dmon_metrics("u")), "# gpu     sm    mem    enc    dec \n# Idx      %      %      %      % \n");
  EXPECT_EQ(dmon_header(parse_dmon_metrics("me")),
            "# gpu     fb   bar1   ccpm  sbecc  dbecc    pci \n# Idx     MB     MB     MB   errs   errs   errs \n");
  // v after c, as nvidia-smi orders its groups; jpg/ofa follow dec where the driver has them.
  EXPECT_EQ(dmon_header(parse_dmon_metrics("vc")), "# gpu   mclk   pclk  pviol  tviol \n# Idx    MHz    MHz      %   bool \n");
  auto engines = parse_dmon_metrics("u");
  engines.jpg_ofa = true;
  EXPECT_EQ(dmon_header(engines), "# gpu     sm    mem    enc    dec    jpg    ofa \n# Idx      %      %      %      %      %      % \n");
}

TEST(Common, Helpers) {
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(split("a,,b", ','), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(to_mib((1ull << 20) * 3 - 1), 3u);
  EXPECT_EQ(to_mib((1ull << 20) * 3), 3u);
  EXPECT_EQ(to_mib((1ull << 20) * 3 + 1), 4u);
  EXPECT_EQ(to_mib(0), 0u);
}
