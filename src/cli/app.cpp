// The gpumem app: every registered command in one CLI11 app, shared by main and the option-parser fuzzer.
#include <algorithm>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"

namespace gpumem::cli {

std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
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
