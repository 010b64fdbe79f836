// gpumem allocators through the control channel: a real gpumem process (tests/control's control_target
// on the host backend) holding memory shows up in the snapshot and in /metrics with its numbers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "exporter/collect.hpp"
#include "exporter/render.hpp"

namespace gpumem::exporter {
namespace {

// control_target: reads "alloc BYTES" lines, answers "ok"; prints "ready PID" once its server runs.
struct Target {
  pid_t pid = -1;
  FILE *to = nullptr, *from = nullptr;
  Target() {
    int in[2], out[2];
    EXPECT_EQ(pipe(in), 0);
    EXPECT_EQ(pipe(out), 0);
    pid = fork();
    if (pid == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      setenv("GPUMEM_BACKEND", "host", 1);
      execl(CONTROL_TARGET, CONTROL_TARGET, nullptr);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to = fdopen(in[1], "w");
    from = fdopen(out[0], "r");
  }
  std::string line() {
    char buf[512] = {};
    if (!std::fgets(buf, sizeof buf, from)) return {};
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  std::string ask(const std::string& command) {
    std::fprintf(to, "%s\n", command.c_str());
    std::fflush(to);
    return line();
  }
  ~Target() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::fclose(to);
    std::fclose(from);
  }
};

TEST(ExporterAllocators, GpumemProcessStatsThroughTheControlChannel) {
  char tmpl[] = "/tmp/gpumem-exporter-ctl-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  setenv("GPUMEM_CONTROL_DIR", dir.c_str(), 1);  // private: other tests' gpumem processes stay out
  {
    Target t;
    ASSERT_EQ(t.line().rfind("ready ", 0), 0u);
    ASSERT_EQ(t.ask("alloc 8388608"), "ok");
    ASSERT_EQ(t.ask("alloc 8388608"), "ok");

    Snapshot s;
    s.hostname = "h";
    CollectOptions o;
    o.control_timeout = std::chrono::milliseconds(2000);
    add_allocators(s, o);
    ASSERT_EQ(s.allocators.size(), 1u);
    const AllocatorMetrics& a = s.allocators[0];
    EXPECT_EQ(a.pid, t.pid);
    EXPECT_EQ(a.command, "control_target");
    EXPECT_GE(a.allocated_bytes, 16ll << 20);
    EXPECT_GE(a.reserved_bytes, a.allocated_bytes);
    EXPECT_GE(a.peak_allocated_bytes, a.allocated_bytes);
    EXPECT_EQ(s.health.control_errors, 0u);

    std::string text = render_metrics(s, ExporterCounters{}, Format::kPrometheusText);
    EXPECT_NE(text.find("gpumem_allocator_allocated_bytes{gpu=\"0\",UUID=\"\",Hostname=\"h\",pid=\"" + std::to_string(t.pid) +
                        "\",command=\"control_target\"} " + std::to_string(a.allocated_bytes) + "\n"),
              std::string::npos)
        << text;
  }
  // The process is gone: no series and no error (exiting is not a failure).
  Snapshot after;
  add_allocators(after, CollectOptions{});
  EXPECT_TRUE(after.allocators.empty());
  EXPECT_EQ(after.health.control_errors, 0u);
  std::system(("rm -rf " + dir).c_str());
}

// Processes that do not answer (stopped) are asked at once: each sample waits about one timeout, not one
// per stopped process (20 of them made every sample 6 s late); each counts as an error.
TEST(ExporterAllocators, ProcessesThatDoNotAnswerAreAskedAtOnce) {
  char tmpl[] = "/tmp/gpumem-exporter-ctl-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  setenv("GPUMEM_CONTROL_DIR", dir.c_str(), 1);
  {
    std::vector<std::unique_ptr<Target>> stopped;
    for (int i = 0; i < 6; ++i) {
      stopped.push_back(std::make_unique<Target>());
      ASSERT_EQ(stopped.back()->line().rfind("ready ", 0), 0u);
      kill(stopped.back()->pid, SIGSTOP);
    }
    Target running;
    ASSERT_EQ(running.line().rfind("ready ", 0), 0u);
    Snapshot s;
    CollectOptions o;
    o.control_timeout = std::chrono::milliseconds(500);
    const auto start = std::chrono::steady_clock::now();
    add_allocators(s, o);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 2.5) << "asked one after another (6 x 0.5 s)";
    ASSERT_EQ(s.allocators.size(), 1u);
    EXPECT_EQ(s.allocators[0].pid, running.pid);
    EXPECT_EQ(s.health.control_errors, 6u);
    for (auto& t : stopped) kill(t->pid, SIGCONT);
  }
  std::system(("rm -rf " + dir).c_str());
}

// CUDA backends name a device by its CUDA_VISIBLE_DEVICES entry: a UUID (or prefix) or CUDA's index.
// The entry decides the GPU (it was compared with the bare UUID, never matched, and a process whose
// CUDA_VISIBLE_DEVICES reversed two GPUs had its allocators shown on the wrong one).
TEST(ExporterAllocators, EachDeviceReportGoesToTheGpuItsKeyNames) {
  Snapshot s;
  for (unsigned i = 0; i < 2; ++i) {
    GpuMetrics g;
    g.index = i;
    g.uuid = i == 0 ? "GPU-aaaa-0000" : "GPU-bbbb-1111";
    g.pci_bus_id = i == 0 ? "00000000:1A:00.0" : "00000000:2B:00.0";
    g.model_name = "H100";
    s.gpus.push_back(g);
  }
  const auto report = [](const std::string& key, int device) {
    control::DeviceReport d;
    d.device_key = key;
    d.device = device;
    return d;
  };
  EXPECT_EQ(gpu_of_report(report("cuda:GPU-bbbb-1111", 0), 7, s), 1u);
  EXPECT_EQ(gpu_of_report(report("cuda:GPU-aaaa", 1), 7, s), 0u);  // a prefix, as CUDA accepts
  EXPECT_EQ(gpu_of_report(report("cuda:1", 0), 7, s), 1u);
  ProcessMetrics p;
  p.pid = 7;
  p.gpu = 1;
  p.kind = ProcessKind::kContext;
  s.processes.push_back(p);
  EXPECT_EQ(gpu_of_report(report("", 0), 7, s), 1u);  // no key: the one GPU NVML shows it on
}

}  // namespace
}  // namespace gpumem::exporter
