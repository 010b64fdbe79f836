// gpumem: one binary, one subcommand per job. Commands register themselves (command.hpp).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include "gpumem/printable.hpp"

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"

namespace {
// Every command ends here: output that did not reach stdout (a full disk, /dev/full) is a failure.
int finish(const std::string& command, int code) {
  std::string why;
  if (!gpumem::cli::stdout_failed(why)) return code;
  std::fprintf(stderr, "gpumem%s%s: %s\n", command.empty() ? "" : " ", command.c_str(), why.c_str());
  return gpumem::cli::kExitFailure;
}
}  // namespace

int main(int argc, char** argv) {
  using namespace gpumem::cli;
  raw_arguments().assign(argv, argv + argc);
  CliApp cli = make_cli_app();
  CLI::App& app = *cli.app;
  const auto& registry = command_registry();
  // CLI11 would say only "A subcommand is required" for a word it does not know.
  const bool known = argc > 1 && std::any_of(registry.begin(), registry.end(),
                                             [&](const CommandSpec& spec) { return spec.name == argv[1]; });
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::string names;
    for (const auto& spec : registry) names += (names.empty() ? "" : ", ") + spec.name;
    std::fprintf(stderr, "gpumem: unknown command '%s' (commands: %s)\n", gpumem::printable(argv[1]).c_str(), names.c_str());
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return finish("", app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return finish("", app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return finish("", app.exit(e));
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
    std::fprintf(stderr, "Run 'gpumem --help' for usage.\n");
    return kExitUsage;
  }
  for (auto& [sub, run] : cli.runners) {
    if (!sub->parsed()) continue;
    int code;
    try {
      code = run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem %s: %s\n", sub->get_name().c_str(), e.what());
      code = kExitFailure;
    }
    return finish(sub->get_name(), code);
  }
  try {
    return cli.summary();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
    return kExitFailure;
  }
}
