// gpumem: one binary, one subcommand per job. Commands register themselves (command.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "gpumem/printable.hpp"

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/output.hpp"
#include "cli/run_options.hpp"

namespace {

// The command being run, for the out-of-memory sentence, which must not need memory itself.
char g_command[64] = "";

// Running out of host memory anywhere, even where no exception may pass (a noexcept free that needed
// memory, a static constructor): one sentence and exit 3, never "terminate called after throwing".
[[noreturn]] void out_of_host_memory() noexcept {
  char line[320];
  const char* tail = " (this machine's memory, or the ulimit -v it runs under, is too small)\n";
  const int n = g_command[0] ? std::snprintf(line, sizeof line, "gpumem %s: out of host memory while running 'gpumem %s'%s",
                                             g_command, g_command, tail)
                             : std::snprintf(line, sizeof line, "gpumem: out of host memory while starting%s", tail);
  if (n > 0) (void)!::write(2, line, std::min<std::size_t>(std::size_t(n), sizeof line - 1));
  ::_exit(gpumem::cli::kExitOutOfMemory);
}

void on_terminate() noexcept {
  if (const std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      out_of_host_memory();
    } catch (...) {
    }
  } else if (void* probe = std::malloc(256)) {
    std::free(probe);
  } else {
    out_of_host_memory();  // no memory even for the exception object (a static constructor's bad_alloc)
  }
  std::abort();
}

// Installed before the other static constructors of this binary (init_priority: the command registrations
// allocate too).
struct InstallTerminateHandler {
  InstallTerminateHandler() { std::set_terminate(on_terminate); }
};
__attribute__((init_priority(101))) InstallTerminateHandler g_install_terminate_handler;

// Every command ends here: output that did not reach stdout (a full disk, /dev/full) is a failure.
int finish(const std::string& command, int code) {
  std::string why;
  // A command that failed has said why (often that very write): one sentence, not two.
  if (!gpumem::cli::stdout_failed(why) || code == gpumem::cli::kExitFailure) return code;
  std::fprintf(stderr, "gpumem%s%s: %s\n", command.empty() ? "" : " ", command.c_str(), why.c_str());
  return gpumem::cli::kExitFailure;
}

int run_main(int argc, char** argv) {
  using namespace gpumem::cli;
  const auto& registry = command_registry();
#ifdef GPUMEM_IMPLIED_COMMAND
  // gpumem-exporter is its command: `gpumem-exporter --listen :9400` as well as `gpumem-exporter exporter
  // --listen :9400` (what `gpumem exporter` runs).
  static char implied_command[] = GPUMEM_IMPLIED_COMMAND;
  std::vector<char*> implied;
  if (!(argc > 1 && std::string(argv[1]) == implied_command)) {
    implied.assign(argv, argv + argc);
    implied.insert(implied.begin() + 1, implied_command);
    implied.push_back(nullptr);
    argv = implied.data();
    ++argc;
  }
#endif
  raw_arguments().assign(argv, argv + argc);
  CliApp cli = make_cli_app();
  CLI::App& app = *cli.app;
  // CLI11 would say only "A subcommand is required" for a word it does not know.
  const bool known = argc > 1 && std::any_of(registry.begin(), registry.end(),
                                             [&](const CommandSpec& spec) { return spec.name == argv[1]; });
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::string names;
    for (const auto& spec : registry) names += (names.empty() ? "" : ", ") + spec.name;
    std::fprintf(stderr, "gpumem: unknown command '%s' (commands: %s)\n", gpumem::printable(argv[1]).c_str(), names.c_str());
    return kExitUsage;
  }
  // `gpumem run` reads its words itself (parse_run_options, one sentence per mistake): the parser sees them
  // only for run's own --help, never the program's words (its own --help, a "--" among its arguments).
  int parsed_argc = argc;
  if (known && std::string(argv[1]) == "run") {
    const auto own = std::vector<std::string>(argv + 2, argv + 2 + run_option_words({argv + 2, argv + argc}));
    const bool help = std::any_of(own.begin(), own.end(), [](const std::string& w) { return w == "-h" || w == "--help"; });
    parsed_argc = help ? 2 + int(own.size()) : 2;
  }
  try {
    app.parse(parsed_argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return finish("", app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    return finish("", app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    return finish("", app.exit(e));
  } catch (const CLI::ParseError& e) {
    const std::string command = known ? std::string(" ") + argv[1] : "";  // named by its command, with its help
    std::fprintf(stderr, "gpumem%s: %s\n", command.c_str(), e.what());
    std::fprintf(stderr, "Run 'gpumem%s --help' for usage.\n", command.c_str());
    return kExitUsage;
  }
  for (auto& [sub, run] : cli.runners) {
    if (!sub->parsed()) continue;
    for (const char* own : {"--json", "--full", "--watch"})  // the summary's: silently ignored otherwise
      if (app.get_option(own)->count() > 0) {
        const std::string name = sub->get_name(), option = own;
        // Suggest the command's own option only where it has one (`gpumem run --json` is refused).
        const std::string hint =
            sub->get_option_no_throw(option) ? "write it after the command: gpumem " + name + " " + option
            : name == "run" && option == "--json"
                ? "gpumem run has no --json; its report is JSON: gpumem run --report FILE -- ..."
                : "gpumem " + name + " has no " + option;
        std::fprintf(stderr, "gpumem: %s before a command belongs to the summary (gpumem %s); %s\n", own, own,
                     hint.c_str());
        return kExitUsage;
      }
    std::snprintf(g_command, sizeof g_command, "%s", sub->get_name().c_str());
    int code;
    try {
      code = run();
    } catch (const std::bad_alloc&) {
      out_of_host_memory();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "gpumem %s: %s\n", sub->get_name().c_str(), e.what());
      code = kExitFailure;
    }
    return finish(sub->get_name(), code);
  }
  try {
    return cli.summary();
  } catch (const std::bad_alloc&) {
    out_of_host_memory();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpumem: %s\n", e.what());
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run_main(argc, argv);
  } catch (const std::bad_alloc&) {
    out_of_host_memory();
  }
}
