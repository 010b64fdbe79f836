// The gpumem binary's exporter against the tools around it: promtool's checker, a real Prometheus
// scraping it (Debian's prometheus package), and the Grafana dashboard in deploy/exporter/. Also the
// command's exit codes. Tests that need promtool or prometheus skip when they are not installed
// (scripts/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>

#include <filesystem>
#include <regex>
#include <set>

#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"
#include "wait_child.hpp"

namespace gpumem::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const char* kScenario =
    "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-8f1c2e4a-1111-2222-3333-444455556666 bus=00000000:18:00.0 total_mib=81559 "
    "reserved_mib=512 used_mib=20480\n"
    "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-9a2d3f5b-1111-2222-3333-444455556666 bus=00000000:2A:00.0 mtemp=na\n"
    "proc gpu=0 pid=1 used_mib=1000 name=init\n"
    "proc gpu=1 pid=999999 used_mib=300 name=gone\n";

std::map<std::string, std::string> fake_env() {
  return {{"GPUMEM_NVML_LIBRARY", fake_nvml_path("current")},
          {"GPUMEM_FAKE_NVML_SCENARIO", write_scenario("ecosystem", kScenario)},
          {"GPUMEM_DEV_DIR", "/nonexistent-dev"}};
}

bool have(const char* tool) { return std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) == 0; }

std::string temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("gpumem-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A child process with its stdout on a pipe, killed (SIGTERM, then SIGKILL) when it goes out of scope.
struct Child {
  pid_t pid = -1;
  int out = -1;
  Child(std::vector<std::string> argv, const std::map<std::string, std::string>& env, const std::string& log) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid = fork();
    if (pid == 0) {
      dup2(fds[1], 1);
      int err = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, 2);
      close(fds[0]);
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    out = fds[0];
  }
  std::string read_line() {
    std::string line;
    char c;
    while (read(out, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  }
  int stop(int sig = SIGTERM) {
    if (pid <= 0) return -1;
    kill(pid, sig);
    int status = 0;
    const bool exited = gpumem::testing::wait_child(pid, &status, 5s);  // else killed
    pid = -1;
    if (!exited) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  ~Child() {
    stop();
    if (out >= 0) close(out);
  }
};

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Starts `gpumem exporter` on a free loopback port; returns the port from its --json line.
int start_exporter(std::unique_ptr<Child>& child, const std::string& dir) {
  child = std::make_unique<Child>(std::vector<std::string>{gpumem_binary(), "exporter", "--listen", "127.0.0.1:0", "--interval",
                                                           "0.2", "--json"},
                                  fake_env(), dir + "/exporter.log");
  auto line = nlohmann::json::parse(child->read_line(), nullptr, false);
  if (line.is_discarded() || !line.contains("port")) return 0;
  return line["port"].get<int>();
}

TEST(ExporterEcosystem, PromtoolAcceptsMetrics) {
  if (!have("promtool")) GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  RunResult r = run_gpumem({"exporter", "--once"}, fake_env());
  ASSERT_EQ(r.status, 0) << r.err;
  std::string dir = temp_dir("promtool");
  std::ofstream(dir + "/metrics.prom") << r.out;
  std::string cmd = "promtool check metrics < " + dir + "/metrics.prom > " + dir + "/lint.txt 2>&1";
  int rc = WEXITSTATUS(std::system(cmd.c_str()));
  // 0: clean; 3: lint findings only. Findings are allowed only on dcgm-exporter's own names and labels
  // (camelCase modelName, counters without _total), which existing dashboards depend on.
  std::string lint = slurp(dir + "/lint.txt");
  EXPECT_TRUE(rc == 0 || rc == 3) << lint;
  std::istringstream lines(lint);
  std::string line;
  while (std::getline(lines, line)) EXPECT_EQ(line.rfind("DCGM_FI_", 0), 0u) << line;
  fs::remove_all(dir);
}

TEST(ExporterEcosystem, RealPrometheusScrapesSeriesWithLabels) {
  if (!have("prometheus")) GTEST_SKIP() << "prometheus not installed";
  std::string dir = temp_dir("prometheus");
  std::unique_ptr<Child> exporter;
  int port = start_exporter(exporter, dir);
  ASSERT_GT(port, 0) << slurp(dir + "/exporter.log");
  int prom_port = free_port();
  std::ofstream(dir + "/prometheus.yml") << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                                         << "scrape_configs:\n  - job_name: gpumem\n    static_configs:\n"
                                         << "      - targets: ['127.0.0.1:" << port << "']\n";
  Child prom({"prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
              "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
             {}, dir + "/prometheus.log");
  httplib::Client api("127.0.0.1", prom_port);
  api.set_connection_timeout(2);
  auto query = [&](const std::string& q) {
    auto res = api.Get("/api/v1/query", httplib::Params{{"query", q}}, httplib::Headers{});
    if (!res || res->status != 200) return nlohmann::json::array();
    auto j = nlohmann::json::parse(res->body, nullptr, false);
    return j.is_discarded() ? nlohmann::json::array() : j["data"]["result"];
  };
  nlohmann::json fb;
  for (int i = 0; i < 120 && fb.size() < 2; ++i) {  // up to 30 s: Prometheus starts, then scrapes each second
    std::this_thread::sleep_for(250ms);
    fb = query("DCGM_FI_DEV_FB_USED");
  }
  ASSERT_EQ(fb.size(), 2u) << slurp(dir + "/prometheus.log");
  for (const auto& series : fb) {
    const auto& m = series["metric"];
    EXPECT_EQ(m["job"], "gpumem");
    for (const char* label : {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}) EXPECT_TRUE(m.contains(label)) << label;
    if (m["gpu"] == "0") {
      EXPECT_EQ(m["UUID"], "GPU-8f1c2e4a-1111-2222-3333-444455556666");
      EXPECT_EQ(m["device"], "nvidia0");
      EXPECT_EQ(m["modelName"], "NVIDIA H100 80GB HBM3");
      EXPECT_EQ(series["value"][1], "20480");
    }
  }
  // Prometheus asks for OpenMetrics first: dcgm's counter names must come through unchanged.
  EXPECT_EQ(query("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").size(), 2u);
  EXPECT_EQ(query("DCGM_FI_DEV_MEMORY_TEMP").size(), 1u);  // GPU 1 does not support it: no series
  EXPECT_EQ(query("up{job=\"gpumem\"} == 1").size(), 1u);
  auto ghosts = query("gpumem_ghost_gpu_memory_bytes");
  ASSERT_EQ(ghosts.size(), 1u);
  EXPECT_EQ(ghosts[0]["metric"]["pid"], "999999");
  auto procs = query("gpumem_process_gpu_memory_bytes");
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0]["metric"]["pid"], "1");
  EXPECT_EQ(procs[0]["metric"]["user"], "root");
  EXPECT_EQ(query("gpumem_gpu_memory_bytes").size(), 8u);  // 2 GPUs x live/cached/other/free
  EXPECT_EQ(exporter->stop(SIGTERM), 0);
  prom.stop();
  fs::remove_all(dir);
}

// Every metric the dashboard queries is one the exporter serves: the names in its PromQL against the
// families in a full /metrics (a real scrape of the binary plus the allocator families, which need
// gpumem processes and so are checked against the renderer's list in render_test).
TEST(ExporterEcosystem, DashboardQueriesOnlyServedMetrics) {
  auto dash = nlohmann::json::parse(slurp(std::string(GPUMEM_SOURCE_DIR) + "/deploy/exporter/grafana-dashboard.json"));
  std::set<std::string> queried;
  std::regex metric(R"(\b(DCGM_FI_[A-Z_]+|gpumem_[a-z_]+)\b)");
  auto collect = [&](const std::string& expr) {
    for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end; ++it) queried.insert((*it)[1]);
  };
  for (const auto& panel : dash["panels"])
    for (const auto& target : panel["targets"]) collect(target["expr"]);
  for (const auto& var : dash["templating"]["list"])
    if (var.contains("definition")) collect(var["definition"]);
  ASSERT_GE(queried.size(), 10u);

  RunResult r = run_gpumem({"exporter", "--once"}, fake_env());
  ASSERT_EQ(r.status, 0) << r.err;
  std::set<std::string> served;
  std::regex type_line(R"(# TYPE (\S+) )");
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), type_line), end; it != end; ++it) served.insert((*it)[1]);
  // The allocator families appear once a gpumem process is running; their names are fixed here and
  // checked against the renderer by render_test (ExporterRender.ProcessesGhostsAndAllocators).
  for (const char* name : {"gpumem_allocator_allocated_bytes", "gpumem_allocator_reserved_bytes",
                           "gpumem_allocator_peak_allocated_bytes", "gpumem_allocator_limit_bytes",
                           "gpumem_allocator_largest_free_block_bytes", "gpumem_allocator_reserved_to_allocated_ratio",
                           "gpumem_allocator_ooms_total", "gpumem_allocator_alloc_retries_total"})
    served.insert(name);
  for (const std::string& name : queried) EXPECT_TRUE(served.count(name)) << "the dashboard queries " << name << ", which the exporter does not serve";
}

TEST(ExporterEcosystem, ExitCodes) {
  EXPECT_EQ(run_gpumem({"exporter", "--listen", "nowhere"}, fake_env()).status, 2);
  EXPECT_EQ(run_gpumem({"exporter", "--interval", "0"}, fake_env()).status, 2);
  // Served, each scrape's Accept header picks the format: the flag alone would be ignored, so it is refused.
  RunResult served_om = run_gpumem({"exporter", "--openmetrics", "--listen", "127.0.0.1:0"}, fake_env());
  EXPECT_EQ(served_om.status, 2) << served_om.err;
  EXPECT_NE(served_om.err.find("--once"), std::string::npos) << served_om.err;
  auto env = fake_env();
  env["GPUMEM_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1";
  RunResult none = run_gpumem({"exporter", "--once"}, env);
  EXPECT_EQ(none.status, 4);
  EXPECT_NE(none.out.find("gpumem_exporter_nvml_up"), std::string::npos);  // health still printed
  RunResult json = run_gpumem({"exporter", "--once", "--json"}, fake_env());
  ASSERT_EQ(json.status, 0) << json.err;
  auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["gpus"].size(), 2u);
  EXPECT_EQ(j["gpus"][0]["memory_used_bytes"], 20480ull << 20);
}

// gpumem-exporter run by itself (a systemd unit, a container's entrypoint) is the exporter: it showed
// gpumem's whole help and refused the exporter's flags.
TEST(ExporterEcosystem, TheExporterBinaryIsTheExporterCommand) {
  const std::string bin = std::string(GPUMEM_BINARY_DIR) + "/gpumem-exporter";
  std::string env;
  for (const auto& [k, v] : fake_env()) env += k + "='" + v + "' ";
  const auto run = [&](const std::string& args, int* status) {
    std::string out;
    FILE* p = popen(("env " + env + bin + " " + args + " 2>&1").c_str(), "r");
    char buf[4096];
    while (p && std::fgets(buf, sizeof buf, p)) out += buf;
    const int st = p ? pclose(p) : -1;
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return out;
  };
  int status = -1;
  const std::string help = run("--help", &status);
  EXPECT_EQ(status, 0) << help;
  EXPECT_NE(help.find("--listen"), std::string::npos) << help;
  const std::string once = run("--once", &status);
  EXPECT_EQ(status, 0) << once;
  EXPECT_NE(once.find("DCGM_FI_DEV_FB_USED"), std::string::npos) << once;
  run("exporter --once", &status);  // as `gpumem exporter` runs it
  EXPECT_EQ(status, 0);
  run("--listen nowhere", &status);
  EXPECT_EQ(status, 2);
}

TEST(ExporterEcosystem, StopsCleanlyOnSignals) {
  std::string dir = temp_dir("signals");
  std::unique_ptr<Child> exporter;
  ASSERT_GT(start_exporter(exporter, dir), 0);
  EXPECT_EQ(exporter->stop(SIGTERM), 0);
  ASSERT_GT(start_exporter(exporter, dir), 0);
  EXPECT_EQ(exporter->stop(SIGINT), 130);
  fs::remove_all(dir);
}

// The address it prints is one a browser or curl takes: an IPv6 host in brackets.
TEST(ExporterEcosystem, AnIpv6ListenAddressPrintsAUsableUrl) {
  const int probe = socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ipv6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) close(probe);
  if (!ipv6) GTEST_SKIP() << "no IPv6 loopback here";
  const std::string dir = temp_dir("ipv6");
  Child child({gpumem_binary(), "exporter", "--listen", "[::1]:0", "--interval", "0.2"}, fake_env(), dir + "/exporter.log");
  std::string log;
  for (int i = 0; i < 500 && log.find("serving") == std::string::npos; ++i) {
    usleep(10000);
    log = slurp(dir + "/exporter.log");
  }
  EXPECT_NE(log.find("serving http://[::1]:"), std::string::npos) << log;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace gpumem::testing
