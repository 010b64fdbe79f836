// gpumem run [--limit SIZE | --fraction F] -- python train.py ...: runs an unmodified PyTorch program with
// gpumem as its CUDA allocator. python/gpumem_sitecustomize.py, copied as sitecustomize.py into a private
// directory first on PYTHONPATH, installs gpumem_torch when the program imports torch; GPUMEM_* variables
// carry the settings. Needs libgpumem.so, gpumem_torch.py (gpumem_pools.py beside it) and
// gpumem_sitecustomize.py beside the gpumem binary (the build and the wheel put them there) or where
// `cmake --install` puts them (install_layout.hpp).
// Options: run_options.hpp; process handling: run_launcher.hpp.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "cli/install_layout.hpp"
#include "cli/output.hpp"
#include "cli/run_launcher.hpp"
#include "cli/run_options.hpp"
#include "gpumem/errors.hpp"

namespace gpumem::cli {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A report as gpumem_torch writes it: the program shares the directory and may leave anything there.
bool well_formed_report(const nlohmann::json& j) {
  if (!j.is_object() || !j.value("pid", nlohmann::json()).is_number_integer()) return false;
  if (j.contains("oom") && !j["oom"].is_boolean()) return false;
  const auto devices = j.value("devices", nlohmann::json::object());
  if (!devices.is_object()) return false;
  for (const auto& [device, d] : devices.items()) {
    if (!d.is_object()) return false;
    for (const auto& [key, value] : d.items())
      if (!value.is_number_unsigned()) return false;
  }
  return true;
}

// The JSON reports the program's Python processes wrote at exit (one per process).
nlohmann::json collect_reports(const fs::path& dir) {
  nlohmann::json all = nlohmann::json::array();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("report-", 0) != 0) continue;
    nlohmann::json j = nlohmann::json::parse(read_file(entry.path()), nullptr, false);
    if (!j.is_discarded() && well_formed_report(j)) all.push_back(std::move(j));
    else std::fprintf(stderr, "gpumem run: %s in its report directory is not a report gpumem wrote: left out\n", name.c_str());
  }
  return all;
}

void print_summary(const nlohmann::json& reports) {
  for (const auto& r : reports) {
    auto devices = r.find("devices");
    if (devices == r.end() || !devices->is_object()) continue;
    for (const auto& [device, d] : devices->items()) {
      const auto live = d.value("peak_requested", std::uint64_t(0));
      const auto reserved = d.value("peak_reserved", std::uint64_t(0));
      std::fprintf(stderr, "gpumem run: pid %lld device %s: peak live %s, peak reserved %s (%.3fx), %lld OOMs\n",
                   r.value("pid", 0LL), device.c_str(), format_bytes(live).c_str(), format_bytes(reserved).c_str(),
                   live ? double(reserved) / double(live) : 0.0, d.value("num_ooms", 0LL));
      // The driver calls behind page-by-page growth, and what they cost the program's threads: where a run
      // is slower than natively, this is most often why (README, "What that costs").
      if (const auto calls = d.value("driver_calls", std::uint64_t(0)); calls)
        std::fprintf(stderr,
                     "gpumem run: pid %lld device %s: %s driver calls to create, map and unmap pages took %.1f ms "
                     "of the program's threads\n",
                     r.value("pid", 0LL), device.c_str(), grouped(calls).c_str(),
                     double(d.value("driver_us", std::uint64_t(0))) / 1000.0);
      // Blocks the program freed while another stream still used them (record_stream) are held until that
      // work is done: memory in use that "live" does not count. Said where it explains the ratio above.
      const auto allocated = d.value("peak_allocated", std::uint64_t(0));
      const auto active = d.value("peak_active", std::uint64_t(0));
      if (allocated && active > allocated + allocated / 100)
        std::fprintf(stderr,
                     "gpumem run: pid %lld device %s: freed blocks that other streams still used kept up to %s "
                     "in use (peak reserved %.3fx that)\n",
                     r.value("pid", 0LL), device.c_str(), format_bytes(active).c_str(),
                     double(reserved) / double(active));
    }
  }
}

// The program's exit code; `killed_by` is set to the signal that ended it (the caller ends gpumem with
// it once the scratch directory is gone).
// A Python that will not load gpumem: -E and -I ignore PYTHONPATH (where gpumem's sitecustomize is), -S
// imports no site module. Returns that option's letter, or 0. Reads the interpreter's own leading options:
// -c, -m, "-", "--" and the script end them; -W and -X take a value.
char python_without_gpumem(const std::vector<std::string>& command) {
  static const std::regex python("(python|pypy)[0-9.]*");
  if (!std::regex_match(fs::path(command[0]).filename().string(), python)) return 0;
  for (std::size_t i = 1; i < command.size(); ++i) {
    const std::string& w = command[i];
    if (w.size() < 2 || w[0] != '-' || w == "--") return 0;
    if (w[1] == '-') {
      if (w == "--check-hash-based-pycs") ++i;
      continue;
    }
    for (std::size_t k = 1; k < w.size(); ++k) {
      const char c = w[k];
      if (c == 'E' || c == 'I' || c == 'S') return c;
      if (c == 'c' || c == 'm') return 0;
      if (c == 'W' || c == 'X') {
        if (k + 1 == w.size()) ++i;
        break;
      }
    }
  }
  return 0;
}

int run(const RunOptions& args, int& killed_by) {
  // An option replaces what the environment says about the same cap.
  if (!args.limit.empty()) {
    setenv("GPUMEM_LIMIT", args.limit.c_str(), 1);
    unsetenv("GPUMEM_FRACTION");
  }
  if (!args.fraction.empty()) {
    setenv("GPUMEM_FRACTION", args.fraction.c_str(), 1);
    unsetenv("GPUMEM_LIMIT");
  }
  if (!args.backend.empty()) setenv("GPUMEM_BACKEND", args.backend.c_str(), 1);
  if (const char* tmp = std::getenv("TMPDIR"); tmp && !*tmp) unsetenv("TMPDIR");  // empty means unset, as for mkstemp
  check_run_environment();
  // Absolute, as --report: the program may change its directory before it writes the trace.
  if (const char* trace = std::getenv("GPUMEM_TRACE"); trace && *trace)
    setenv("GPUMEM_TRACE", fs::absolute(trace).c_str(), 1);
  const char* lib_env = std::getenv("GPUMEM_LIBRARY");
  const fs::path library = lib_env && *lib_env ? fs::path(lib_env) : runtime_file("libgpumem.so");
  const fs::path shim = runtime_file("gpumem_torch.py"), site = runtime_file("gpumem_sitecustomize.py");
  const fs::path pools = shim.parent_path() / "gpumem_pools.py";  // gpumem_torch imports it as it loads
  for (const fs::path& need : {library, shim, pools, site}) {
    if (!fs::exists(need)) {
      std::fprintf(stderr, "gpumem run: %s is missing; build the whole project (it belongs beside the gpumem binary) "
                   "or install it (cmake --install, the .deb or the wheel)\n",
                   need.c_str());
      return kExitFailure;
    }
  }

  ScratchDir scratch("gpumem-run-");
  const fs::path& dir = scratch.path();
  fs::copy_file(site, dir / "sitecustomize.py");
  fs::copy_file(shim, dir / "gpumem_torch.py");
  fs::copy_file(pools, dir / "gpumem_pools.py");
  // CUDA IPC and memory history: optional modules, found beside the shim.
  for (const char* extra : {"gpumem_ipc.py", "gpumem_history.py"}) {
    const fs::path from = shim.parent_path() / extra;
    if (fs::exists(from)) fs::copy_file(from, dir / extra);
  }

  const char* old_path = std::getenv("PYTHONPATH");
  std::string pythonpath = dir.string() + (old_path && *old_path ? ":" + std::string(old_path) : "");
  setenv("PYTHONPATH", pythonpath.c_str(), 1);
  setenv("GPUMEM_LIBRARY", fs::absolute(library).c_str(), 1);
  setenv("GPUMEM_REPORT_DIR", dir.c_str(), 1);

  // A warning, not a refusal: the processes such a Python starts (workers, torchrun's ranks) inherit
  // PYTHONPATH and do load gpumem unless they too are started with the option.
  if (const char option = python_without_gpumem(args.command); option && !args.quiet)
    std::fprintf(stderr,
                 "gpumem run: warning: %s -%c %s, so gpumem does not load into it and PyTorch keeps its own "
                 "allocator there (drop -%c; Python processes it starts without -%c do get gpumem)\n",
                 fs::path(args.command[0]).filename().c_str(), option,
                 option == 'S' ? "imports no site module" : "ignores PYTHONPATH", option, option);

  // PyTorch's own allocator reads this variable; under gpumem none of it applies (and PyTorch no longer
  // refuses an unknown key there), so a user who tuned it is told once, before the program's output.
  // PYTORCH_ALLOC_CONF is its newer name.
  for (const char* name : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (const char* conf = std::getenv(name); conf && *conf && !args.quiet)
      std::fprintf(stderr,
                   "gpumem run: %s='%s' configures PyTorch's own allocator, which gpumem replaces in this program: "
                   "its settings do not apply (gpumem's caps are --limit and --fraction)\n",
                   name, conf);

  const int status = wait_for_child(launch(args.command));
  const int code = exit_code_of(status);
  if (WIFSIGNALED(status)) killed_by = WTERMSIG(status);

  nlohmann::json reports = collect_reports(dir);
  if (!args.quiet) print_summary(reports);
  bool report_failed = false;
  if (!args.report.empty()) {
    std::ofstream out(args.report);
    out << reports.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    out.flush();
    if (!out) {
      std::fprintf(stderr, "gpumem run: cannot write the report to %s\n", args.report.c_str());
      report_failed = true;
    }
  }
  bool oom = false;
  for (const auto& r : reports) oom = oom || r.value("oom", false);
  // Python ends with status 1 on an uncaught exception; any other status is the program's own choice (a
  // wrapper script that handled the failure), and passes through.
  if (code == 1 && oom) {
    std::fprintf(stderr, "gpumem run: the program stopped on a gpumem out-of-memory error%s\n",
                 args.limit.empty() && args.fraction.empty() ? "" : " (raise --limit / --fraction)");
    return kExitOutOfMemory;
  }
  return code == 0 && report_failed ? kExitFailure : code;
}

// The words after "run" exactly as this process was given them: CLI11 may move a "--" inside the
// program's own arguments or bind the program's options to ours, so parse_run_options reads these.
std::vector<std::string> words_after_run() {
  const std::vector<std::string>& argv = raw_arguments();
  std::size_t i = 1;
  while (i < argv.size() && argv[i] != "run") ++i;
  return {argv.begin() + std::ptrdiff_t(std::min(i + 1, argv.size())), argv.end()};
}

CommandRunner setup_run(CLI::App& sub) {
  // Declared for --help only; parse_run_options reads the words verbatim and refuses what it does not know.
  struct Declared {
    std::string limit, fraction, backend, report;
    std::vector<std::string> command;
    bool quiet = false;
  };
  auto d = std::make_shared<Declared>();
  sub.add_option("--limit", d->limit,
                 "Cap on the memory gpumem reserves on each GPU, e.g. 20GiB, 1.5GB or bytes, at least 2MiB; 'none' "
                 "for no cap (overrides GPUMEM_LIMIT). An allocation beyond it fails with an out-of-memory error");
  sub.add_option("--fraction", d->fraction, "Cap as a fraction [0.0001, 1] of each GPU's memory");
  sub.add_option("--backend", d->backend, "cuda (default), cuda-plain (no virtual memory), host or sim");
  sub.add_option("--report", d->report, "Write each Python process's peaks (JSON) to FILE (its directory must exist)");
  sub.add_flag("-q,--quiet", d->quiet,
               "Print no summary line at exit, nor the notes on PYTORCH_CUDA_ALLOC_CONF and on python -E, -I or -S "
               "(which keep gpumem out of that Python process)");
  for (CLI::Option* o : sub.get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  sub.add_option("command", d->command, "The program and its arguments (after --)")->allow_extra_args();
  sub.allow_extras();
  sub.prefix_command();
  sub.footer(std::string("Example: gpumem run --limit 20GiB -- python train.py --epochs 3\n"
                         "Unknown options, bad values and bad GPUMEM_* variables are refused (exit 2) before the "
                         "program starts.\nThe program's exit status is passed through; when signal N ended it, gpumem "
                         "ends itself with signal N once it has cleaned up, as the program did (a shell shows "
                         "128+N, 130 for Ctrl-C, and a loop stops), without a core file of its own; 3 when it "
                         "ended with status 1 on an uncaught gpumem OOM; 127 when the program (or its #! interpreter) is not found, 126 when it "
                         "cannot be run, as a shell says. The program dies with gpumem.\n\n") +
             kExitCodeHelp);
  return [d] {
    try {
      int killed_by = 0;
      const int code = run(parse_run_options(words_after_run()), killed_by);
      if (killed_by) die_of_signal(killed_by);
      return code;
    } catch (const RunUsageError& e) {
      std::fprintf(stderr, "gpumem run: %s\n", e.what());
      return int(kExitUsage);
    } catch (const LaunchError& e) {
      std::fprintf(stderr, "gpumem run: %s\n", e.what());
      return e.exit_code();
    }
  };
}

}  // namespace

GPUMEM_REGISTER_COMMAND(run, "run", "Run a PyTorch program with gpumem as its CUDA allocator", 30, setup_run);

}  // namespace gpumem::cli
