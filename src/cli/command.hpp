// Subcommand registry: each cmd_*.cpp registers itself with GPUMEM_REGISTER_COMMAND; main.cpp wires
// them into one CLI11 app. A command's setup() declares its options on `sub` and returns the function
// that runs it and yields the process exit code (see exit_codes.hpp).
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpumem::cli {

using CommandRunner = std::function<int()>;
struct CommandSpec {
  std::string name;
  std::string description;
  int order;  // position in --help
  std::function<CommandRunner(CLI::App& sub)> setup;
};

std::vector<CommandSpec>& command_registry();
// This process's arguments as given, set by main before parsing, for a command that must read its words
// verbatim (run: its options end where the program's begin).
std::vector<std::string>& raw_arguments();

// Checks for the arguments several commands take, with one plain sentence each (CLI11's own name
// ranges such as "0.000000 to 1.79e308"): a PID, and a device index in a controlled process.
CLI::Validator pid_validator();
CLI::Validator device_index_validator();

// `gpumem` alone: declares --json / --watch on the main app and returns the summary's runner.
CommandRunner setup_summary(CLI::App& app);
// The gpumem app with every registered command (in --help order) and the runner of each.
struct CliApp {
  std::unique_ptr<CLI::App> app;
  std::vector<std::pair<CLI::App*, CommandRunner>> runners;
  CommandRunner summary;  // `gpumem` with no subcommand
};
CliApp make_cli_app();

struct CommandRegistration {
  explicit CommandRegistration(CommandSpec spec) { command_registry().push_back(std::move(spec)); }
};

#define GPUMEM_REGISTER_COMMAND(ident, ...) \
  static ::gpumem::cli::CommandRegistration gpumem_command_##ident{::gpumem::cli::CommandSpec{__VA_ARGS__}}

}  // namespace gpumem::cli
