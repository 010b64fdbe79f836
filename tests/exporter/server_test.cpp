// The exporter's HTTP server in-process: background samples against the NVML test double, both
// formats, read-only, and the faults it must survive: NVML missing, a lost GPU, a sample that hangs,
// 100 parallel scrapes, clients that never send or never read (no leaked descriptors).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "exporter/server.hpp"
#include "nvml/fake_nvml_env.hpp"

namespace gpumem::exporter {
namespace {

using namespace std::chrono_literals;

const char* kScenario =
    "driver 550.54.15\n"
    "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-8f1c2e4a-1111-2222-3333-444455556666 bus=00000000:18:00.0 total_mib=81559 "
    "reserved_mib=512 used_mib=20480 util_gpu=97 mtemp=na\n"
    "gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-aaaaaaaa-1111-2222-3333-444455556666 bus=00000000:3B:00.0 lost=1\n"
    "proc gpu=0 pid=1 used_mib=1000 name=init\n";

// A running exporter on a free loopback port.
struct Running {
  Sampler sampler;
  MetricsServer server;
  int port = 0;
  std::thread thread;
  Running(Sampler::CollectFn collect, ServerOptions options = {}, std::chrono::milliseconds interval = 50ms)
      : sampler(std::move(collect), interval), server(sampler, with_any_port(options)) {
    port = server.bind();
    sampler.start();
    thread = std::thread([this] { server.serve(); });
  }
  ~Running() {
    server.stop();
    thread.join();
    sampler.stop();
  }
  static ServerOptions with_any_port(ServerOptions o) {
    o.port = 0;
    return o;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(5);
    c.set_read_timeout(10);
    return c;
  }
  void wait_for_sample() const {
    for (int i = 0; i < 500 && !sampler.latest(); ++i) std::this_thread::sleep_for(10ms);
    ASSERT_TRUE(sampler.latest());
  }
};

Sampler::CollectFn fake_nvml_collector() {
  testing::use_fake_nvml("current", testing::write_scenario("exporter", kScenario));
  CollectOptions o;
  o.dev_dir = "/nonexistent-dev";
  return nvml_collector(o);
}

// The last XID from NVML's event set: 0 before any, the XID once the driver reports one; the lost GPU,
// which cannot register for events, has no series.
TEST(ExporterServer, LastXidFromEvents) {
  std::string text = kScenario;
  std::string xid_file = testing::write_scenario("exporter-xid", "") + ".xid";
  std::remove(xid_file.c_str());
  text.replace(text.find("mtemp=na\n"), 9, "mtemp=na xid_file=" + xid_file + "\n");
  testing::use_fake_nvml("current", testing::write_scenario("exporter-xid", text));
  CollectOptions o;
  o.dev_dir = "/nonexistent-dev";
  Running r(nvml_collector(o));
  r.wait_for_sample();
  auto c = r.client();
  const std::string gpu0 = "DCGM_FI_DEV_XID_ERRORS{gpu=\"0\",UUID=\"GPU-8f1c2e4a-1111-2222-3333-444455556666\"";
  auto before = c.Get("/metrics");
  ASSERT_TRUE(before);
  size_t at = before->body.find(gpu0);
  ASSERT_NE(at, std::string::npos) << before->body;
  EXPECT_EQ(before->body.substr(before->body.find('}', at), 4), "} 0\n");
  EXPECT_EQ(before->body.find("DCGM_FI_DEV_XID_ERRORS{gpu=\"1\""), std::string::npos);
  EXPECT_NE(before->body.find("\nDCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu=\"0\""), std::string::npos);
  std::ofstream(xid_file) << "79\n";
  std::string body;
  for (int i = 0; i < 200; ++i) {  // the next background sample drains the event
    auto res = c.Get("/metrics");
    ASSERT_TRUE(res);
    body = res->body;
    at = body.find(gpu0);
    if (at != std::string::npos && body.substr(body.find('}', at), 5) == "} 79\n") break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(body.substr(body.find('}', body.find(gpu0)), 5), "} 79\n") << body;
}

size_t open_fds() {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(ExporterServer, ServesMetricsFromTheBackgroundSample) {
  Running r(fake_nvml_collector());
  r.wait_for_sample();
  auto c = r.client();
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(res->body.find("\nDCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-8f1c2e4a-1111-2222-3333-444455556666\","
                           "pci_bus_id=\"00000000:18:00.0\",device=\"nvidia0\",modelName=\"NVIDIA H100 80GB HBM3\","),
            std::string::npos)
      << res->body;
  EXPECT_EQ(res->body.find("DCGM_FI_DEV_MEMORY_TEMP"), std::string::npos);  // "na" in the scenario: left out
  EXPECT_NE(res->body.find("gpumem_exporter_nvml_up{"), std::string::npos);
  EXPECT_NE(res->body.find("\ngpumem_process_gpu_memory_bytes{gpu=\"0\""), std::string::npos);  // PID 1 exists
  // The lost GPU: down, and its failed reads counted.
  EXPECT_NE(res->body.find(R"(gpumem_gpu_up{gpu="1",UUID="",pci_bus_id="",device="",Hostname=")"), std::string::npos);
  EXPECT_EQ(res->body.find("gpumem_exporter_nvml_errors_total{Hostname=\"" + host_name() + "\"} 0\n"), std::string::npos);

  auto om = c.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"}});
  ASSERT_TRUE(om);
  EXPECT_EQ(om->get_header_value("Content-Type"), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(om->body.substr(om->body.size() - 6), "# EOF\n");

  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
}

TEST(ExporterServer, ReadOnly) {
  Running r(fake_nvml_collector());
  auto c = r.client();
  auto post = c.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  auto del = c.Delete("/healthz");
  ASSERT_TRUE(del);
  EXPECT_EQ(del->status, 405);
  auto missing = c.Get("/debug");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(ExporterServer, NvmlMissingStillServesHealth) {
  setenv("GPUMEM_NVML_LIBRARY", "/nonexistent/libnvidia-ml.so.1", 1);
  Running r(nvml_collector(CollectOptions{}));
  r.wait_for_sample();
  auto c = r.client();
  auto res = c.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_NE(res->body.find("gpumem_exporter_nvml_up{Hostname=\"" + host_name() + "\"} 0\n"), std::string::npos);
  EXPECT_EQ(res->body.find("DCGM_FI_"), std::string::npos);
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body.rfind("ok (NVML unavailable: ", 0), 0u) << health->body;
}

TEST(ExporterServer, ScrapeNeverWaitsForASlowSample) {
  std::atomic<int> calls{0};
  std::atomic<bool> release{false};
  Running r([&] {
    if (calls++ > 0)
      while (!release) std::this_thread::sleep_for(1ms);  // every sample after the first hangs
    Snapshot s;
    s.hostname = "h";
    s.health.nvml_up = true;
    s.health.taken_at_unix = 1;
    return s;
  }, {}, 20ms);
  r.wait_for_sample();
  while (calls < 2) std::this_thread::sleep_for(1ms);
  auto c = r.client();
  for (int i = 0; i < 20; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto res = c.Get("/metrics");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 1s);  // generous: sanitizer builds, 2 shared cores
  }
  // After three intervals (plus slack) without a new sample, the exporter says it is stale.
  std::this_thread::sleep_for(2200ms);
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  release = true;
}

TEST(ExporterServer, HundredParallelScrapes) {
  Running r(fake_nvml_collector());
  r.wait_for_sample();
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 100; ++i)
    clients.emplace_back([&] {
      auto c = r.client();
      auto res = c.Get("/metrics");
      if (res && res->status == 200 && res->body.find("gpumem_exporter_scrapes_total") != std::string::npos) ++ok;
    });
  for (auto& t : clients) t.join();
  EXPECT_EQ(ok, 100);
  EXPECT_GE(r.sampler.counters().scrapes, 100u);
}

int connect_to(int port, int rcvbuf) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  return fd;
}

TEST(ExporterServer, ClientsThatNeverSendOrNeverReadDoNotStarveOthersOrLeak) {
  // A large answer (20000 process series, a few MB) so a client that does not read fills the socket.
  Snapshot big;
  big.hostname = "h";
  big.health.nvml_up = true;
  for (int i = 0; i < 20000; ++i) {
    ProcessMetrics p;
    p.pid = i + 1;
    p.used_bytes = 1ull << 20;
    p.command = "python3";
    big.processes.push_back(p);
  }
  ServerOptions o;
  o.threads = 2;
  o.io_timeout = 1s;
  Running r([big] { return big; }, o, 1000ms);
  r.wait_for_sample();
  size_t fds_before = open_fds();

  std::vector<int> stuck;
  for (int i = 0; i < 2; ++i) {  // send a request, never read the answer
    int fd = connect_to(r.port, 4096);
    const char req[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    EXPECT_EQ(send(fd, req, sizeof req - 1, 0), static_cast<ssize_t>(sizeof req - 1));
    stuck.push_back(fd);
  }
  stuck.push_back(connect_to(r.port, 4096));  // connect, never send
  std::this_thread::sleep_for(100ms);

  auto start = std::chrono::steady_clock::now();
  auto c = r.client();
  auto res = c.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // freed by the 1 s timeouts, not stuck forever

  for (int fd : stuck) close(fd);
  std::this_thread::sleep_for(1500ms);  // let the server's timed-out connections close
  EXPECT_EQ(open_fds(), fds_before);
}

// httplib's timeout is per read: clients sending their header a line at a time held every worker for as
// long as they went on (a second line then got a quick 400 and the connection stayed). Each request now
// has the timeout as its deadline, and a request that ran out or was refused ends its connection.
TEST(ExporterServer, ClientsTricklingTheirHeaderDoNotStarveOthers) {
  ServerOptions o;
  o.threads = 2;
  o.io_timeout = 1s;
  Running r([] { return Snapshot{}; }, o, 1000ms);
  r.wait_for_sample();
  std::vector<int> slow;
  for (int i = 0; i < 2; ++i) {
    slow.push_back(connect_to(r.port, 4096));
    const char line[] = "GET /metrics HTTP/1.1\r\n";
    EXPECT_EQ(send(slow.back(), line, sizeof line - 1, 0), static_cast<ssize_t>(sizeof line - 1));
  }
  std::atomic<bool> done{false};
  std::thread trickle([&] {  // a header line every 200 ms, each within the per-read timeout, for 6 s
    for (int i = 0; i < 30 && !done; ++i) {
      std::this_thread::sleep_for(200ms);
      for (int fd : slow) send(fd, "X-A: b\r\n", 8, MSG_NOSIGNAL);
    }
  });
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  auto c = r.client();
  auto res = c.Get("/healthz");
  const auto waited = std::chrono::steady_clock::now() - start;
  done = true;
  trickle.join();
  for (int fd : slow) close(fd);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(waited, 4s) << "served only once the trickling clients stopped (6 s)";
}

TEST(ExporterServer, ListenParsing) {
  EXPECT_EQ(parse_listen("127.0.0.1:9400").host, "127.0.0.1");
  EXPECT_EQ(parse_listen("127.0.0.1:9400").port, 9400);
  EXPECT_EQ(parse_listen(":9500").host, "0.0.0.0");
  EXPECT_EQ(parse_listen("[::1]:9400").host, "::1");
  EXPECT_THROW(parse_listen("9400"), ServerError);
  EXPECT_THROW(parse_listen("localhost:http"), ServerError);
  EXPECT_THROW(parse_listen("localhost:70000"), ServerError);
}

TEST(ExporterServer, PortInUseIsOneClearError) {
  Running r(fake_nvml_collector());
  Sampler s([] { return Snapshot{}; }, 1s);
  ServerOptions o;
  o.port = r.port;
  MetricsServer second(s, o);
  try {
    second.bind();
    FAIL() << "bound a port already in use";
  } catch (const ServerError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot listen on 127.0.0.1:" + std::to_string(r.port)), std::string::npos);
  }
}

}  // namespace
}  // namespace gpumem::exporter
