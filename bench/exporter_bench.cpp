// Cost of `gpumem exporter`: a whole /metrics scrape over loopback HTTP (what Prometheus pays, and what
// the issue bounds at 5 ms for 8 GPUs and 100 processes), its rendering alone, and one background
// sample, against the NVML test double with 8 GPUs and 100 processes (real PIDs from /proc, so the
// /proc reads are real). Run: scripts/bench.sh, or build/bench/exporter_bench.
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "exporter/server.hpp"

namespace {

using namespace gpumem::exporter;

// Writes the scenario and points this process's NVML loader at the double (once).
void use_fake_nvml_with_8_gpus() {
  static bool done = [] {
    std::string path = "/tmp/gpumem-exporter-bench-" + std::to_string(getpid()) + ".txt";
    std::ofstream f(path);
    for (int i = 0; i < 8; ++i)
      f << "gpu name=\"NVIDIA H200\" uuid=GPU-0000000" << i << "-1111-2222-3333-444455556666 bus=00000000:" << std::hex
        << (0x18 + i * 16) << std::dec << ":00.0 total_mib=143771 used_mib=" << 1000 * (i + 1) << " util_gpu=" << 10 * i << "\n";
    int procs = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::string name = e.path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      f << "proc gpu=" << procs % 8 << " pid=" << name << " used_mib=" << 100 + procs << " name=python3\n";
      if (++procs == 100) break;
    }
    f.close();
    setenv("GPUMEM_NVML_LIBRARY", GPUMEM_FAKE_NVML, 1);
    setenv("GPUMEM_FAKE_NVML_SCENARIO", path.c_str(), 1);
    return true;
  }();
  (void)done;
}

CollectOptions bench_options() {
  CollectOptions o;
  o.control = false;  // no gpumem processes here; the control channel is measured by the control tests
  return o;
}

void BM_BackgroundSample(benchmark::State& state) {
  use_fake_nvml_with_8_gpus();
  auto collect = nvml_collector(bench_options());
  for (auto _ : state) benchmark::DoNotOptimize(collect());
}
BENCHMARK(BM_BackgroundSample)->Unit(benchmark::kMicrosecond);

void BM_RenderOnly(benchmark::State& state) {
  use_fake_nvml_with_8_gpus();
  Snapshot s = nvml_collector(bench_options())();
  ExporterCounters c;
  size_t bytes = 0;
  for (auto _ : state) bytes = render_metrics(s, c, Format::kPrometheusText).size();
  state.counters["bytes"] = static_cast<double>(bytes);
  state.counters["processes"] = static_cast<double>(s.processes.size());
}
BENCHMARK(BM_RenderOnly)->Unit(benchmark::kMicrosecond);

// A whole scrape as Prometheus does it: HTTP GET over loopback, keep-alive, answer read to the end.
void BM_HttpScrape(benchmark::State& state) {
  use_fake_nvml_with_8_gpus();
  Sampler sampler(nvml_collector(bench_options()), std::chrono::milliseconds(1000));
  ServerOptions o;
  o.port = 0;
  MetricsServer server(sampler, o);
  int port = server.bind();
  sampler.start();
  std::thread serving([&] { server.serve(); });
  while (!sampler.latest()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  size_t bytes = 0;
  for (auto _ : state) {
    auto res = client.Get("/metrics");
    if (!res || res->status != 200) state.SkipWithError("scrape failed");
    else bytes = res->body.size();
  }
  state.counters["bytes"] = static_cast<double>(bytes);
  server.stop();
  serving.join();
  sampler.stop();
}
BENCHMARK(BM_HttpScrape)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
