// Rendering /metrics from plain snapshots: dcgm-exporter's names, labels and units, fields left out
// when absent, the memory split, process and ghost series, allocator series, both text formats.
#include <gtest/gtest.h>

#include <map>
#include <sstream>

#include "gpumem/printable.hpp"
#include "exporter/render.hpp"

namespace gpumem::exporter {
namespace {

constexpr unsigned long long kMiB = 1ull << 20;

Snapshot two_gpus() {
  Snapshot s;
  s.hostname = "node-1";
  GpuMetrics a;
  a.index = 0;
  a.uuid = "GPU-aaaa";
  a.pci_bus_id = "00000000:18:00.0";
  a.model_name = "NVIDIA H100 80GB HBM3";
  a.minor = 0;
  a.fb_total_bytes = 81559 * kMiB;
  a.fb_reserved_bytes = 512 * kMiB;
  a.fb_used_bytes = 20480 * kMiB;
  a.fb_free_bytes = (81559 - 512 - 20480) * kMiB;
  a.gpu_util_percent = 97;
  a.mem_copy_util_percent = 41;
  a.sm_clock_mhz = 1755;
  a.mem_clock_mhz = 2619;
  a.gpu_temp_c = 61;
  a.memory_temp_c = 70;
  a.power_watts = 412.345;
  a.total_energy_mj = 123456789;
  a.pcie_replays = 3;
  a.last_xid = 79;
  a.remapped_rows_correctable = 4;
  a.remapped_rows_uncorrectable = 1;
  a.row_remap_failure = 0;
  GpuMetrics b;  // a GPU that supports almost nothing
  b.index = 1;
  b.uuid = "GPU-bbbb";
  b.model_name = "Some \"quoted\" GPU";
  b.minor = 1;
  b.up = false;
  s.gpus = {a, b};
  ProcessMetrics p;
  p.gpu = 0;
  p.pid = 4242;
  p.used_bytes = 12288 * kMiB;
  p.user = "alice";
  p.command = "python3";
  p.container = "0123456789ab";
  p.pod = "train-0";
  p.namespace_ = "ml";
  ProcessMetrics ghost;
  ghost.gpu = 0;
  ghost.pid = 999;
  ghost.kind = ProcessKind::kExited;
  ghost.used_bytes = 100 * kMiB;
  ProcessMetrics holder;
  holder.gpu = 0;
  holder.pid = 77;
  holder.kind = ProcessKind::kNoContext;
  holder.command = "sleep";
  s.processes = {p, ghost, holder};
  AllocatorMetrics alloc;
  alloc.gpu = 0;
  alloc.pid = 4242;
  alloc.command = "python3";
  alloc.allocated_bytes = 6000 * kMiB;
  alloc.reserved_bytes = 9000 * kMiB;
  alloc.peak_allocated_bytes = 8000 * kMiB;
  alloc.requested_bytes = 5900 * kMiB;
  alloc.largest_free_bytes = 1000 * kMiB;
  alloc.ooms = 2;
  alloc.alloc_retries = 5;
  s.allocators = {alloc};
  s.health.nvml_up = true;
  s.health.taken_at_unix = 1000;
  return s;
}

// name{labels} -> value for every sample line.
std::map<std::string, std::string> samples(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

const std::string kGpu0 =
    R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1")";

TEST(ExporterRender, DcgmNamesLabelsAndUnits) {
  ExporterCounters c;
  auto m = samples(render_metrics(two_gpus(), c, Format::kPrometheusText));
  EXPECT_EQ(m["DCGM_FI_DEV_FB_USED{" + kGpu0 + "}"], "20480");
  EXPECT_EQ(m["DCGM_FI_DEV_FB_FREE{" + kGpu0 + "}"], "60567");
  EXPECT_EQ(m["DCGM_FI_DEV_FB_RESERVED{" + kGpu0 + "}"], "512");
  EXPECT_EQ(m["DCGM_FI_DEV_GPU_UTIL{" + kGpu0 + "}"], "97");
  EXPECT_EQ(m["DCGM_FI_DEV_MEM_COPY_UTIL{" + kGpu0 + "}"], "41");
  EXPECT_EQ(m["DCGM_FI_DEV_SM_CLOCK{" + kGpu0 + "}"], "1755");
  EXPECT_EQ(m["DCGM_FI_DEV_MEM_CLOCK{" + kGpu0 + "}"], "2619");
  EXPECT_EQ(m["DCGM_FI_DEV_GPU_TEMP{" + kGpu0 + "}"], "61");
  EXPECT_EQ(m["DCGM_FI_DEV_MEMORY_TEMP{" + kGpu0 + "}"], "70");
  EXPECT_EQ(m["DCGM_FI_DEV_POWER_USAGE{" + kGpu0 + "}"], "412.345");
  EXPECT_EQ(m["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" + kGpu0 + "}"], "123456789");
  EXPECT_EQ(m["DCGM_FI_DEV_PCIE_REPLAY_COUNTER{" + kGpu0 + "}"], "3");
  EXPECT_EQ(m["DCGM_FI_DEV_XID_ERRORS{" + kGpu0 + "}"], "79");
  EXPECT_EQ(m["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{" + kGpu0 + "}"], "4");
  EXPECT_EQ(m["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{" + kGpu0 + "}"], "1");
  EXPECT_EQ(m["DCGM_FI_DEV_ROW_REMAP_FAILURE{" + kGpu0 + "}"], "0");
  Snapshot none = two_gpus();
  none.gpus[0].last_xid = 0;  // registered, no XID yet: 0, as dcgm-exporter shows it
  EXPECT_EQ(samples(render_metrics(none, c, Format::kPrometheusText))["DCGM_FI_DEV_XID_ERRORS{" + kGpu0 + "}"], "0");
}

TEST(ExporterRender, UnsupportedFieldsAreLeftOutNotZero) {
  ExporterCounters c;
  std::string text = render_metrics(two_gpus(), c, Format::kPrometheusText);
  EXPECT_EQ(text.find("DCGM_FI_DEV_FB_USED{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(text.find("DCGM_FI_DEV_GPU_TEMP{gpu=\"1\""), std::string::npos);
  EXPECT_EQ(text.find(R"(DCGM_FI_DEV_POWER_USAGE{gpu="1")"), std::string::npos);
  EXPECT_EQ(text.find(R"(DCGM_FI_DEV_XID_ERRORS{gpu="1")"), std::string::npos);  // no XID events on it
  // The lost GPU is still visible, as down.
  EXPECT_NE(text.find(R"(gpumem_gpu_up{gpu="1",UUID="GPU-bbbb",pci_bus_id="",device="nvidia1",Hostname="node-1"} 0)"),
            std::string::npos)
      << text;
  Snapshot quoted = two_gpus();
  quoted.gpus[0].model_name = "Some \"quoted\"\\ GPU\n";
  EXPECT_NE(render_metrics(quoted, c, Format::kPrometheusText).find(R"(modelName="Some \"quoted\"\\ GPU\n")"),
            std::string::npos);
  // A family no GPU reports has no HELP/TYPE either.
  Snapshot bare = two_gpus();
  for (auto& g : bare.gpus) g.memory_temp_c.reset();
  EXPECT_EQ(render_metrics(bare, c, Format::kPrometheusText).find("DCGM_FI_DEV_MEMORY_TEMP"), std::string::npos);
}

TEST(ExporterRender, MemorySplitAddsUpToTotal) {
  ExporterCounters c;
  auto m = samples(render_metrics(two_gpus(), c, Format::kPrometheusText));
  const std::string own = R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",Hostname="node-1")";
  auto get = [&](const char* state) { return std::stoull(m["gpumem_gpu_memory_bytes{" + own + ",state=\"" + state + "\"}"]); };
  EXPECT_EQ(get("live"), 6000 * kMiB);
  EXPECT_EQ(get("cached"), 3000 * kMiB);
  EXPECT_EQ(get("other"), (20480 + 512 - 9000) * kMiB);
  EXPECT_EQ(get("live") + get("cached") + get("other") + get("free"), 81559 * kMiB);
}

// Whatever a driver reports (used beyond the total, figures near 2^64), no state is negative or wrapped.
TEST(ExporterRender, MemorySplitNeverGoesNegative) {
  Snapshot s = two_gpus();
  s.gpus[0].fb_total_bytes = 100 * kMiB;
  s.gpus[0].fb_used_bytes = 200 * kMiB;
  s.gpus[0].fb_reserved_bytes = 50 * kMiB;
  s.gpus[0].fb_free_bytes = 0;
  ExporterCounters c;
  for (const auto& [series, value] : samples(render_metrics(s, c, Format::kPrometheusText)))
    EXPECT_NE(value.rfind('-', 0), 0u) << series << " " << value;
  s.gpus[0].fb_used_bytes = ~0ULL - kMiB;  // used + reserved overflows 64 bits
  auto m = samples(render_metrics(s, c, Format::kPrometheusText));
  const std::string own = R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",Hostname="node-1")";
  const std::string other = m["gpumem_gpu_memory_bytes{" + own + ",state=\"other\"}"];
  ASSERT_FALSE(other.empty());
  EXPECT_GT(std::stod(other), 1e18);
}

// An allocator on the host or sim backend holds no GPU memory: it is not live memory of any GPU.
TEST(ExporterRender, AllocatorsOffTheGpuAreNotInItsMemorySplit) {
  Snapshot s = two_gpus();
  const std::string own = R"(gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",Hostname="node-1")";
  const auto live = [&](const Snapshot& x) {
    return samples(render_metrics(x, ExporterCounters{}, Format::kPrometheusText))["gpumem_gpu_memory_bytes{" + own + ",state=\"live\"}"];
  };
  const std::string before = live(s);
  AllocatorMetrics host;
  host.gpu = 0;
  host.pid = 4242;
  host.allocated_bytes = host.reserved_bytes = 1000 * kMiB;
  host.on_gpu = false;
  s.allocators.push_back(host);
  EXPECT_EQ(live(s), before);
}

TEST(ExporterRender, ProcessesGhostsAndAllocators) {
  ExporterCounters c;
  auto m = samples(render_metrics(two_gpus(), c, Format::kPrometheusText));
  const std::string proc = R"(gpu="0",UUID="GPU-aaaa",Hostname="node-1",pid="4242")";
  EXPECT_EQ(m["gpumem_process_gpu_memory_bytes{" + proc +
              R"(,user="alice",command="python3",container="0123456789ab",pod="train-0",namespace="ml"})"],
            std::to_string(12288 * kMiB));
  EXPECT_EQ(m[R"(gpumem_ghost_process_info{gpu="0",UUID="GPU-aaaa",Hostname="node-1",pid="999",kind="exited",user="",command="",container="",pod="",namespace=""})"], "1");
  EXPECT_EQ(m[R"(gpumem_ghost_process_info{gpu="0",UUID="GPU-aaaa",Hostname="node-1",pid="77",kind="no_context",user="",command="sleep",container="",pod="",namespace=""})"], "1");
  EXPECT_EQ(m[R"(gpumem_ghost_gpu_memory_bytes{gpu="0",UUID="GPU-aaaa",Hostname="node-1",pid="999"})"], std::to_string(100 * kMiB));
  const std::string alloc = "{" + proc + R"(,command="python3"})";
  EXPECT_EQ(m["gpumem_allocator_allocated_bytes" + alloc], std::to_string(6000 * kMiB));
  EXPECT_EQ(m["gpumem_allocator_reserved_bytes" + alloc], std::to_string(9000 * kMiB));
  EXPECT_EQ(m["gpumem_allocator_peak_allocated_bytes" + alloc], std::to_string(8000 * kMiB));
  EXPECT_EQ(m["gpumem_allocator_requested_bytes" + alloc], std::to_string(5900 * kMiB));
  EXPECT_EQ(m["gpumem_allocator_largest_free_block_bytes" + alloc], std::to_string(1000 * kMiB));
  EXPECT_EQ(m["gpumem_allocator_reserved_to_allocated_ratio" + alloc], "1.5");
  EXPECT_EQ(m["gpumem_allocator_ooms_total" + alloc], "2");
  EXPECT_EQ(m["gpumem_allocator_alloc_retries_total" + alloc], "5");
  EXPECT_EQ(m.count("gpumem_allocator_limit_bytes" + alloc), 0u);  // no limit set: left out
}

// Any user names their process: a byte that is not UTF-8 in a label value made Prometheus reject the whole
// scrape (every GPU's metrics). It becomes U+FFFD; an escape character is valid UTF-8 and stays.
TEST(ExporterRender, ProcessNamesThatAreNotUtf8KeepTheScrapeValid) {
  ExporterCounters c;
  Snapshot s = two_gpus();
  s.processes[0].command = "sl\x1b[31m\xff";
  const std::string text = render_metrics(s, c, Format::kPrometheusText);
  EXPECT_EQ(text.find('\xff'), std::string::npos);
  EXPECT_NE(text.find("command=\"sl\x1b[31m\xEF\xBF\xBD\""), std::string::npos) << text;
  EXPECT_EQ(gpumem::valid_utf8("ok \xe6\x97\xa5 \xc0\xaf \xed\xa0\x80"), "ok \xe6\x97\xa5 \xEF\xBF\xBD\xEF\xBF\xBD \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(ExporterRender, HealthMetrics) {
  ExporterCounters c;
  c.samples = 10;
  c.nvml_errors = 4;
  c.scrapes = 7;
  c.last_scrape_seconds = 0.002;
  c.now_unix = 1002.5;
  Snapshot s = two_gpus();
  s.health.unreadable_processes = 3;
  auto m = samples(render_metrics(s, c, Format::kPrometheusText));
  EXPECT_EQ(m[R"(gpumem_exporter_nvml_up{Hostname="node-1"})"], "1");
  EXPECT_EQ(m[R"(gpumem_exporter_nvml_errors_total{Hostname="node-1"})"], "4");
  EXPECT_EQ(m[R"(gpumem_exporter_unreadable_processes{Hostname="node-1"})"], "3");
  EXPECT_EQ(m[R"(gpumem_exporter_samples_total{Hostname="node-1"})"], "10");
  EXPECT_EQ(m[R"(gpumem_exporter_scrapes_total{Hostname="node-1"})"], "7");
  EXPECT_EQ(m[R"(gpumem_exporter_sample_age_seconds{Hostname="node-1"})"], "2.5");
  EXPECT_EQ(m[R"(gpumem_exporter_scrape_duration_seconds{Hostname="node-1"})"], "0.002");
}

TEST(ExporterRender, HelpAndTypeBeforeEverySampleFamily) {
  ExporterCounters c;
  std::string text = render_metrics(two_gpus(), c, Format::kPrometheusText);
  std::istringstream in(text);
  std::string line, current;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) current = line.substr(7, line.find(' ', 7) - 7);
    if (line.empty() || line[0] == '#') continue;
    EXPECT_EQ(line.substr(0, line.find_first_of("{ ")), current) << line;
  }
  EXPECT_NE(text.find("# TYPE gpumem_allocator_ooms_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"), std::string::npos);
  EXPECT_EQ(text.find("# EOF"), std::string::npos);
}

TEST(ExporterRender, OpenMetricsCountersUnitsAndEof) {
  ExporterCounters c;
  std::string text = render_metrics(two_gpus(), c, Format::kOpenMetrics);
  EXPECT_NE(text.find("# TYPE gpumem_allocator_ooms counter\n"), std::string::npos);
  EXPECT_NE(text.find("\ngpumem_allocator_ooms_total{"), std::string::npos);
  // dcgm-exporter's counter names lack _total: typed unknown so the sample names stay unchanged.
  EXPECT_NE(text.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown\n"), std::string::npos);
  EXPECT_NE(text.find("# UNIT gpumem_allocator_allocated_bytes bytes\n"), std::string::npos);
  EXPECT_NE(text.find("# UNIT gpumem_exporter_sample_duration_seconds seconds\n"), std::string::npos);
  ASSERT_GE(text.size(), 6u);
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
}

TEST(ExporterRender, NegotiatesFormatFromAccept) {
  EXPECT_EQ(negotiate_format(""), Format::kPrometheusText);
  EXPECT_EQ(negotiate_format("text/plain;version=0.0.4;q=0.5,*/*;q=0.1"), Format::kPrometheusText);
  EXPECT_EQ(negotiate_format("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                             "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            Format::kOpenMetrics);
  EXPECT_STREQ(content_type(Format::kPrometheusText), "text/plain; version=0.0.4; charset=utf-8");
}

TEST(ExporterRender, EmptySnapshotStillServesHealth) {
  ExporterCounters c;
  Snapshot s;
  s.hostname = "h";
  s.health.nvml_error = "NVML is not installed.";
  auto m = samples(render_metrics(s, c, Format::kPrometheusText));
  EXPECT_EQ(m[R"(gpumem_exporter_nvml_up{Hostname="h"})"], "0");
  EXPECT_EQ(m.count("gpumem_gpu_up"), 0u);
}

}  // namespace
}  // namespace gpumem::exporter
