#include "exporter/server.hpp"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "exporter/deadline_server.hpp"

namespace gpumem::exporter {
namespace {

constexpr const char* kIndexPage =
    "<html><head><title>gpumem exporter</title></head><body><h1>gpumem exporter</h1>"
    "<p><a href=\"/metrics\">/metrics</a> &middot; <a href=\"/healthz\">/healthz</a></p></body></html>\n";

// A sample older than this many intervals means the sampler is stuck (e.g. in a hung NVML call).
constexpr double kStaleIntervals = 3;

void refuse_method(const httplib::Request&, httplib::Response& res) {
  res.status = 405;
  res.set_header("Allow", "GET, HEAD");
  res.set_content("the gpumem exporter is read-only: use GET\n", "text/plain; charset=utf-8");
}

}  // namespace

ServerOptions parse_listen(const std::string& text) {
  ServerOptions o;
  size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw ServerError("--listen needs HOST:PORT (e.g. 127.0.0.1:9400), not '" + text + "'.");
  std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  o.host = host.empty() ? "0.0.0.0" : host;
  size_t used = 0;
  int p = -1;
  try {
    p = std::stoi(port, &used);
  } catch (const std::exception&) {
  }
  if (used != port.size() || p < 0 || p > 65535)
    throw ServerError("--listen needs a port from 0 to 65535, not '" + port + "'.");
  o.port = p;
  return o;
}

MetricsServer::MetricsServer(Sampler& sampler, ServerOptions options)
    : sampler_(sampler), options_(std::move(options)), http_(std::make_unique<DeadlineServer>()) {
  static_cast<DeadlineServer&>(*http_).set_request_deadline(options_.io_timeout);
  unsigned threads = options_.threads ? options_.threads : 1;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_read_timeout(options_.io_timeout);
  http_->set_write_timeout(options_.io_timeout);
  http_->set_keep_alive_timeout(options_.io_timeout.count());
  http_->set_keep_alive_max_count(100);
  http_->set_payload_max_length(64 << 10);
  http_->set_tcp_nodelay(true);  // headers and body go out in separate writes: no 40 ms Nagle/delayed-ACK stall
  // httplib's default adds SO_REUSEPORT, which lets a second exporter share the port and silently
  // split the scrapes between two processes; SO_REUSEADDR alone still allows a quick restart.
  http_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });

  http_->Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    auto start = std::chrono::steady_clock::now();
    Format format = negotiate_format(req.get_header_value("Accept"));
    auto snapshot = sampler_.latest();
    ExporterCounters counters = sampler_.counters();
    static const Snapshot kEmpty{};
    res.set_content(render_metrics(snapshot ? *snapshot : kEmpty, counters, format), content_type(format));
    sampler_.record_scrape(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
  http_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    double age = sampler_.seconds_since_last_sample();
    double limit = kStaleIntervals * std::chrono::duration<double>(sampler_.interval()).count() + 2;
    auto snapshot = sampler_.latest();
    if (!snapshot || !(age <= limit)) {
      res.status = 503;
      res.set_content(snapshot ? "stale: the last sample is " + std::to_string(age) + " s old\n" : "starting: no sample yet\n",
                      "text/plain; charset=utf-8");
      return;
    }
    std::string body = "ok\n";
    if (!snapshot->health.nvml_up) body = "ok (NVML unavailable: " + snapshot->health.nvml_error + ")\n";
    res.set_content(body, "text/plain; charset=utf-8");
  });
  http_->Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kIndexPage, "text/html"); });
  http_->Post(".*", refuse_method);
  http_->Put(".*", refuse_method);
  http_->Patch(".*", refuse_method);
  http_->Delete(".*", refuse_method);
}

MetricsServer::~MetricsServer() { stop(); }

namespace {
// cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed inside Debian's compiled
// library): a burst of scrapers (several Prometheus replicas, a dashboard reloading) then loses SYNs and
// waits seconds for retransmits. listen() again on the listening socket widens its queue; the socket is
// the one of this process that listens on `port`.
void widen_backlog(int port) noexcept {
  DIR* fds = opendir("/proc/self/fd");
  if (!fds) return;
  while (dirent* e = readdir(fds)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(fds)) continue;
    int listening = 0;
    socklen_t len = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    len = sizeof addr;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    if (bound == port) ::listen(fd, SOMAXCONN);
  }
  closedir(fds);
}
}  // namespace

int MetricsServer::bind() {
  int port = options_.port;
  if (port == 0) port = http_->bind_to_any_port(options_.host);
  else if (!http_->bind_to_port(options_.host, port)) port = -1;
  if (port <= 0)
    throw ServerError("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                      " (address in use, not local, or not permitted).");
  widen_backlog(port);
  return port;
}

void MetricsServer::serve() {
  serving_ = true;
  if (!stop_requested_) http_->listen_after_bind();
  serving_ = false;
}

void MetricsServer::stop() noexcept {
  stop_requested_ = true;
  // httplib's stop() does nothing until listen_after_bind() has marked itself running, so a stop that
  // races with the start of serve() is repeated until serve() has returned.
  while (serving_) {
    http_->stop();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace gpumem::exporter
