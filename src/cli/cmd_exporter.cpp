// gpumem exporter: Prometheus /metrics (dcgm-exporter's names, plus per-process, ghost and gpumem
// allocator series) over samples taken in the background. --once prints one scrape and exits.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "cli/output.hpp"
#include "exporter/server.hpp"
#include "exporter/snapshot_json.hpp"
#include "monitor/procfs.hpp"

namespace gpumem::cli {
namespace {

struct ExporterOptions {
  std::string listen = "127.0.0.1:9400", interval = "1";
  bool once = false, json = false, openmetrics = false;
};

int print_once(const ExporterOptions& o, const exporter::Sampler::CollectFn& collect) {
  exporter::Snapshot s = collect();
  std::string text;
  if (o.json) {
    text = json_text(exporter::snapshot_json(s));
  } else {
    exporter::ExporterCounters c;
    c.samples = 1;
    c.nvml_errors = s.health.nvml_errors;
    c.control_errors = s.health.control_errors;
    c.now_unix = s.health.taken_at_unix;
    text = exporter::render_metrics(s, c, o.openmetrics ? exporter::Format::kOpenMetrics : exporter::Format::kPrometheusText);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  if (!s.health.nvml_up) {
    std::fprintf(stderr, "gpumem exporter: %s\n", s.health.nvml_error.c_str());
    return kExitNoDevice;
  }
  return std::fflush(stdout) == 0 ? kExitOk : kExitFailure;
}

int run_exporter(const ExporterOptions& o) {
  long interval_ms = parse_seconds_ms("--interval", o.interval);
  exporter::ServerOptions server_options;
  try {
    server_options = exporter::parse_listen(o.listen);
  } catch (const exporter::ServerError& e) {
    throw monitor::UsageError(e.what());
  }
  exporter::CollectOptions collect_options;
  collect_options.dev_dir = monitor::device_dir();
  auto collect = exporter::nvml_collector(collect_options);
  if (o.once) return print_once(o, collect);

  // SIGINT/SIGTERM go to one waiting thread (blocked everywhere else, so worker threads never see them).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // internal: wakes the waiter when serving ends on its own
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a scraper that hangs up mid-answer is not our death

  exporter::Sampler sampler(collect, std::chrono::milliseconds(interval_ms));
  exporter::MetricsServer server(sampler, server_options);
  int port = 0;
  try {
    port = server.bind();
  } catch (const exporter::ServerError& e) {
    std::fprintf(stderr, "gpumem exporter: %s\n", e.what());
    return kExitFailure;
  }
  sampler.start();
  if (o.json) std::printf("{\"listen\": \"%s\", \"port\": %d, \"interval_s\": %g}\n", server_options.host.c_str(), port, interval_ms / 1000.0);
  else {
    const std::string& h = server_options.host;  // an IPv6 address goes in brackets in a URL
    const std::string url_host = h.find(':') != std::string::npos ? "[" + h + "]" : h;
    std::fprintf(stderr, "gpumem exporter: serving http://%s:%d/metrics, sampling every %g s\n", url_host.c_str(), port, interval_ms / 1000.0);
  }
  std::fflush(stdout);

  std::atomic<int> stopped_by{0};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    stopped_by = sig;
    server.stop();
  });
  server.serve();  // returns once stopped
  const bool failed = stopped_by == 0;  // serve() ended on its own (the listening socket failed)
  if (failed) pthread_kill(waiter.native_handle(), SIGUSR1);  // wake the waiter
  waiter.join();
  // The sampler may be blocked in NVML on a hung GPU, for good: the process ends anyway, a little later.
  const int code = failed ? kExitFailure : stopped_by == SIGINT ? kExitInterrupted : kExitOk;
  std::thread([code] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::fflush(nullptr);
    _exit(code);
  }).detach();
  sampler.stop();
  if (failed) {
    std::fprintf(stderr, "gpumem exporter: the HTTP server stopped on its own.\n");
    return kExitFailure;
  }
  return stopped_by == SIGINT ? kExitInterrupted : kExitOk;
}

}  // namespace

GPUMEM_REGISTER_COMMAND(
    exporter, "exporter", "Prometheus /metrics: dcgm-exporter's GPU metrics plus processes, ghosts and gpumem allocators", 60,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<ExporterOptions>();
      sub.footer(std::string(kExitCodeHelp) + "  exporter: 0 after SIGTERM (a service's normal stop), 130 after Ctrl-C\n");
      sub.add_option("--listen", o->listen, "HOST:PORT to serve on (default 127.0.0.1:9400; :9400 for every interface)");
      sub.add_option("--interval", o->interval, "seconds between background samples (default 1)");
      auto* once = sub.add_flag("--once", o->once, "print one sample's /metrics to stdout and exit (no server)");
      // Served, the format follows each scrape's Accept header; the flag would be silently ignored there.
      auto* openmetrics =
          sub.add_flag("--openmetrics", o->openmetrics, "with --once: OpenMetrics instead of the Prometheus text format")
              ->needs(once);
      sub.add_flag("--json", o->json, "with --once: the sample as JSON; serving: print the bound address as one JSON line")
          ->excludes(openmetrics);  // two output formats at once: one would be silently dropped
      return [o] { return run_monitor_command("exporter", [&] { return run_exporter(*o); }); };
    });

}  // namespace gpumem::cli
