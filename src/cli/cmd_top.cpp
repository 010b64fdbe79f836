// gpumem top: the live full-screen view (src/tui does the work).
#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "tui/screen.hpp"
#include "tui/top_app.hpp"

namespace gpumem::cli {
namespace {

struct TopCliOptions {
  std::string ids, delay = "1";
  bool readonly = false;
};

}  // namespace

GPUMEM_REGISTER_COMMAND(
    top, "top", "live full-screen view: GPUs, memory split by allocators, history, processes, actions", 12,
    [](CLI::App& sub) -> CommandRunner {
      auto o = std::make_shared<TopCliOptions>();
      sub.add_option("-i,--id", o->ids, "GPUs: comma-separated indices, UUIDs or PCI bus ids");
      sub.add_option("-d,--delay", o->delay, "seconds between refreshes (default 1)");
      sub.add_flag("--readonly", o->readonly, "no actions (clear, limit, stop, kill)");
      sub.footer(std::string("Keys:\n") + tui::kKeyHelp + "\n\n" + kExitCodeHelp +
                 "  top: 0 after q, 130 after Ctrl-C, 143 after SIGTERM, 2 without a terminal\n");
      return [o] {
        return run_monitor_command("top", [&] {
          tui::TopOptions t;
          t.ids = o->ids;
          t.period = std::chrono::milliseconds(parse_seconds_ms("-d", o->delay));
          t.readonly = o->readonly;
          return tui::run_top(t);
        });
      };
    });

}  // namespace gpumem::cli
