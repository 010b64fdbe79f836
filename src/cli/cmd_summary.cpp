// `gpumem` with no subcommand: the gpustat-like summary (src/tui/summary.cpp does the work).
#include <unistd.h>

#include <cstdlib>

#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "tui/summary.hpp"

namespace gpumem::cli {

CommandRunner setup_summary(CLI::App& app) {
  struct Options {
    bool json = false;
    bool full = false;
    std::string watch;
    bool watch_given = false;
  };
  auto o = std::make_shared<Options>();
  app.add_flag("--json", o->json, "without a subcommand: the summary as JSON (one line per sample)");
  app.add_flag("--full", o->full,
               "with --json: every field of the sample in bytes, as libgpumem_monitor.so and gpumem.gpus() read it");
  app.add_option("--watch", o->watch, "without a subcommand: repeat the summary in place every SEC seconds (default 1)")
      ->expected(0, 1)
      ->type_name("[SEC]")
      ->trigger_on_parse()
      ->each([o](const std::string&) { o->watch_given = true; });
  return [o, &app] {
    return run_monitor_command("", [&] {
      tui::SummaryOptions s;
      s.json = o->json;
      s.full = o->full;
      if (s.full && !s.json) throw monitor::UsageError("--full goes with --json (the full sample document).");
      if (o->watch_given || app.count("--watch")) s.watch_s = o->watch.empty() ? 1.0 : parse_seconds_ms("--watch", o->watch) / 1000.0;
      const char* no_color = std::getenv("NO_COLOR");
      s.color = isatty(STDOUT_FILENO) && !(no_color && *no_color);
      return tui::run_summary(s);
    });
  };
}

}  // namespace gpumem::cli
