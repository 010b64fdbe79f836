// The gpumem app: every registered command in one CLI11 app, shared by main and the option-parser fuzzer.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "cli/command.hpp"
#include "gpumem/memory.hpp"
#include "cli/exit_codes.hpp"

namespace gpumem::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}

namespace {
// A whole number in [lo, hi], else the sentence `what`.
CLI::Validator whole_number(long lo, long hi, const std::string& what, const std::string& name) {
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long v = std::strtol(text.c_str(), &end, 10);
        if (text.empty() || *end || errno || v < lo || v > hi) return what + ", not '" + text + "'";
        return "";
      },
      name);
}
}  // namespace

CLI::Validator pid_validator() { return whole_number(1, INT32_MAX, "a PID is a positive whole number", "PID"); }
CLI::Validator device_index_validator() {
  // A process's default allocators (gpumem/memory.hpp): a larger index is bad input here, not a failure there.
  return whole_number(0, kMaxDevices - 1, "a device index is a whole number from 0 to " + std::to_string(kMaxDevices - 1), "DEVICE");
}

std::vector<std::string>& raw_arguments() {
  static std::vector<std::string> args;
  return args;
}

CliApp make_cli_app() {
  CliApp cli;
  cli.app = std::make_unique<CLI::App>("gpumem: see, explain and control GPU memory");
  CLI::App& app = *cli.app;
  app.footer(kExitCodeHelp);
  app.require_subcommand(0, 1);  // none: the one-shot summary
  cli.summary = setup_summary(app);
  app.set_version_flag("--version", "gpumem 0.1.0");
  auto& registry = command_registry();
  std::stable_sort(registry.begin(), registry.end(),
                   [](const CommandSpec& a, const CommandSpec& b) { return a.order < b.order; });
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    sub->footer(kExitCodeHelp);
    cli.runners.emplace_back(sub, spec.setup(*sub));
  }
  return cli;
}

}  // namespace gpumem::cli
