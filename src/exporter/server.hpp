// The exporter's HTTP side (cpp-httplib): GET/HEAD /metrics (Prometheus text, or OpenMetrics when the
// Accept header asks for it) and /healthz, rendered from the Sampler's latest snapshot; every other
// method is refused (405), every other path is 404: the exporter is read-only. Contract: a scrape
// never calls NVML; a fixed pool of worker threads serves connections, and the timeout bounds each whole
// request (reading, answering, writing; DeadlineServer) and the wait for the next one, so a client that
// never sends, never reads or sends a byte at a time cannot starve the others for longer than that nor
// leak. bind() throws ServerError with one sentence.
#pragma once
#include <gpumem/errors.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "exporter/sampler.hpp"

namespace httplib {
class Server;
}

namespace gpumem::exporter {

class ServerError : public Error {
 public:
  using Error::Error;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 9400;  // 0: any free port (tests)
  unsigned threads = 8;
  std::chrono::seconds io_timeout{5};
};

// "127.0.0.1:9400", ":9400" (all interfaces), "[::1]:9400" -> host and port; throws ServerError.
ServerOptions parse_listen(const std::string& text);

class MetricsServer {
 public:
  MetricsServer(Sampler& sampler, ServerOptions options);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int bind();     // returns the bound port
  void serve();   // blocks until stop(); returns at once if stop() came first
  void stop() noexcept;  // from any thread; returns once serve() has returned (or never runs)

 private:
  Sampler& sampler_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> serving_{false}, stop_requested_{false};
};

}  // namespace gpumem::exporter
