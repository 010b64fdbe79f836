// gpumem dmon: rolling per-GPU lines like nvidia-smi dmon, with memory used / reserved / free.
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "monitor/dmon.hpp"
#include "monitor/loop.hpp"
#include "monitor/sampler.hpp"

namespace gpumem::cli {
namespace {

struct DmonOptions {
  std::string ids, metrics = monitor::kDmonDefault, delay = "1";
  std::optional<long> count;  // none: until Ctrl-C
};

int run_dmon(const DmonOptions& o) {
  monitor::DmonColumns cols = monitor::parse_dmon_metrics(o.metrics);
  long period_ms = parse_seconds_ms("-d", o.delay);
  if (o.count && *o.count < 1) throw monitor::UsageError("-c needs a count >= 1.");
  auto nvml = nvml::Nvml::open();
  monitor::SamplerOptions so;
  so.processes = false;
  so.pcie = cols.pcie;
  so.violations = cols.violations;
  cols.jpg_ofa = nvml->library().fn().jpg_utilization != nullptr;
  monitor::Sampler sampler = monitor::make_sampler(nvml, monitor::select_gpus(*nvml, o.ids), so);
  monitor::install_stop_handlers();
  std::string text = monitor::dmon_header(cols);
  monitor::Ticker ticker{std::chrono::milliseconds(period_ms)};
  for (long n = 0; !o.count || n < *o.count; ++n) {
    if (n > 0 && !ticker.wait()) break;
    text += monitor::dmon_lines(sampler.sample(), cols);
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
      std::fprintf(stderr, "gpumem dmon: cannot write output: %s.\n", std::strerror(errno));
      return kExitFailure;
    }
    text.clear();
  }
  return monitor::stop_exit_code();
}

}  // namespace

GPUMEM_REGISTER_COMMAND(
    dmon, "dmon", "rolling per-GPU lines: power, temperature, utilization, clocks, memory, PCIe", 30,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<DmonOptions>();
      sub.add_option("-i,--id", o->ids, "GPUs: comma-separated indices, UUIDs or PCI bus ids");
      sub.add_option("-d,--delay", o->delay, "seconds between samples (default 1)");
      sub.add_option("-c,--count", o->count, "stop after COUNT samples (default: until Ctrl-C)");
      sub.add_option("-s,--select", o->metrics,
                     "metric groups as nvidia-smi dmon: p power/temp, u utilization (sm mem enc dec, jpg ofa where "
                     "the driver has them), c clocks, v power/thermal violations (pviol %, tviol 0/1), m FB/BAR1 "
                     "memory, e ECC/PCIe replay errors, t PCIe throughput; g memory the driver reserves and free memory (default pucmg)");
      return [o] { return run_monitor_command("dmon", [&] { return run_dmon(*o); }); };
    });

}  // namespace gpumem::cli
