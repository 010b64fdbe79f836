// gpumem: one binary, one subcommand per job. Commands register themselves (command.hpp).
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"

namespace gpumem::cli {
std::vector<CommandSpec>& command_registry() {
  static std::vector<CommandSpec> registry;
  return registry;
}
}  // namespace gpumem::cli

int main(int argc, char** argv) {
  using namespace gpumem::cli;
  CLI::App app{"gpumem: see, explain and control GPU memory"};
  app.footer(kExitCodeHelp);
  app.require_subcommand(0, 1);  // none: the one-shot summary
  CommandRunner summary = setup_summary(app);
  app.set_version_flag("--version", "gpumem 0.1.0");
  auto& registry = command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const CommandSpec& a, const CommandSpec& b) { return a.order < b.order; });
  std::vector<std::pair<CLI::App*, CommandRunner>> runners;
  for (auto& spec : registry) {
    CLI::App* sub = app.add_subcommand(spec.name, spec.description);
    sub->footer(kExitCodeHelp);
    runners.emplace_back(sub, spec.setup(*sub));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
    std::fprintf(stderr, "Run 'gpumem --help' for usage.\n");
    return kExitUsage;
  }
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem %s: %s\n", sub->get_name().c_str(), e.what());
      return kExitFailure;
    }
  }
  try {
    return summary();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
    return kExitFailure;
  }
}
