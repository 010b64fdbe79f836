// gpumem allocators through the control channel: a real gpumem process (tests/control's control_target
// on the host backend) holding memory shows up in the snapshot and in /metrics with its numbers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace gpumem::exporter
