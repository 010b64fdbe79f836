#include "cli/run_options.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "api/env_config.hpp"
#include "gpumem/limits.hpp"

namespace gpumem::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBackends[] = {"cuda", "cuda-plain", "host", "sim"};

[[noreturn]] void usage(const std::string& sentence) { throw RunUsageError(sentence); }

void check_backend(const std::string& where, const std::string& name) {
  for (const char* b : kBackends) {
    if (name == b) return;
  }
  usage(where + " '" + name + "' is not a backend (use cuda, cuda-plain, host or sim)");
}

void check_report_path(const std::string& path) {
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) usage("--report " + path + ": the directory " + dir.string() + " does not exist");
  if (fs::is_directory(p, ec)) usage("--report " + path + " is a directory; give a file name");
  if (::access(dir.c_str(), W_OK) != 0) usage("--report " + path + ": the directory " + dir.string() + " is not writable");
}

// GPUMEM_TRACE: each process the program starts writes it (or a file beside it with its pid in the name,
// when another process writes it): the file, or its directory, must take writes.
void check_trace_path(const std::string& path) {
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  const std::string var = "GPUMEM_TRACE=" + path;
  std::error_code ec;
  if (fs::is_directory(p, ec)) usage(var + " is a directory; give a file name (.gz compresses)");
  if (!fs::is_directory(dir, ec)) usage(var + ": the directory " + dir.string() + " does not exist");
  if (fs::exists(p, ec) ? ::access(p.c_str(), W_OK) != 0 : ::access(dir.c_str(), W_OK) != 0)
    usage(var + ": " + (fs::exists(p, ec) ? "the file is" : "the directory " + dir.string() + " is") + " not writable");
}

// run's options that take a value (the next word, or after '=').
constexpr std::pair<const char*, std::string RunOptions::*> kValued[] = {
    {"--limit", &RunOptions::limit}, {"--fraction", &RunOptions::fraction},
    {"--backend", &RunOptions::backend}, {"--report", &RunOptions::report}};
}  // namespace

std::size_t run_option_words(const std::vector<std::string>& words) {
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--" || w.empty() || w[0] != '-') return i;
    for (const auto& [name, field] : kValued)
      if (w == name) ++i;  // and its value
  }
  return words.size();
}

RunOptions parse_run_options(const std::vector<std::string>& words) {
  RunOptions o;
  std::size_t i = 0;
  for (; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "--") {
      ++i;
      break;
    }
    if (w.empty() || w[0] != '-') break;
    if (w == "-q" || w == "--quiet") {
      o.quiet = true;
      continue;
    }
    bool known = false;
    for (const auto& [name, field] : kValued) {
      const std::string n = name;
      std::string value;
      if (w == n) {
        // "--" after an option is a forgotten value, not a value.
        if (i + 1 >= words.size() || words[i + 1] == "--") usage(n + " needs a value");
        value = words[++i];
      } else if (w.rfind(n + "=", 0) == 0) {
        value = w.substr(n.size() + 1);
      } else {
        continue;
      }
      if (value.empty()) usage(n + " needs a value, not an empty string");
      if (!(o.*field).empty()) usage(n + " is given twice");
      o.*field = value;
      known = true;
      break;
    }
    if (!known) usage("unknown option '" + w + "' (run's options are --limit, --fraction, --backend, --report, --quiet; the program follows '--')");
  }
  o.command.assign(words.begin() + std::ptrdiff_t(std::min(i, words.size())), words.end());
  if (o.command.empty()) usage("no command given (usage: gpumem run [--limit SIZE | --fraction F] -- python train.py)");
  if (!o.limit.empty() && !o.fraction.empty()) usage("--limit and --fraction exclude each other");
  try {
    if (!o.limit.empty()) parse_limit(o.limit);
    if (!o.fraction.empty()) parse_fraction(o.fraction);
  } catch (const std::invalid_argument& e) {
    // `--limit 0.5`: a share of the device is --fraction's (gpumem limit PID 0.5 takes either).
    const bool share = !o.limit.empty() && o.limit.find('.') != std::string::npos &&
                       o.limit.find_first_not_of("0123456789.") == std::string::npos;
    usage(std::string(o.limit.empty() ? "--fraction: " : "--limit: ") + e.what() +
          (share ? " (for a share of each GPU's memory use --fraction " + o.limit + ")" : ""));
  }
  if (!o.backend.empty()) check_backend("--backend", o.backend);
  if (!o.report.empty()) check_report_path(o.report);
  return o;
}

void check_run_environment() {
  try {
    api::env_limit();
    api::env_fraction("GPUMEM_FRACTION");
    api::env_size("GPUMEM_HOST_CAPACITY");
    api::env_size("GPUMEM_SIM_CAPACITY");
    api::env_cuda_page_bytes();
    api::env_check_switches();
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.rfind("gpumem: ", 0) == 0) what.erase(0, 8);
    usage(what);
  }
  check_backend("GPUMEM_BACKEND", api::env_backend());
  if (const char* trace = std::getenv("GPUMEM_TRACE"); trace && *trace) check_trace_path(trace);
  // Where the scratch directory goes: a sentence naming TMPDIR here, not a library's error about a path.
  if (const char* tmp = std::getenv("TMPDIR"); tmp && *tmp) {
    std::error_code ec;
    if (!fs::is_directory(tmp, ec))
      usage(std::string("TMPDIR=") + tmp + " is not a directory (gpumem run makes its temporary directory there)");
    if (::access(tmp, W_OK | X_OK) != 0)
      usage(std::string("TMPDIR=") + tmp + " is not writable (gpumem run makes its temporary directory there)");
    // That directory goes on the program's PYTHONPATH, where ':' separates entries: gpumem would not load.
    if (fs::absolute(tmp, ec).string().find(':') != std::string::npos)
      usage(std::string("TMPDIR=") + tmp + " has a ':' in its path, which PYTHONPATH cannot hold (gpumem run puts "
            "its temporary directory there); use a directory without one");
  }
  // The host backend's shared capacity file (tests): made on first use, so its directory must exist.
  if (const char* shared = std::getenv("GPUMEM_HOST_SHARED"); shared && *shared) {
    const fs::path p(shared);
    std::error_code ec;
    if (fs::is_directory(p, ec) || !fs::is_directory(p.has_parent_path() ? p.parent_path() : fs::path("."), ec))
      usage(std::string("GPUMEM_HOST_SHARED=") + shared + " must name a file in a directory that exists");
  }
  if (const char* lib = std::getenv("GPUMEM_LIBRARY"); lib && *lib) {
    std::error_code ec;
    if (!fs::is_regular_file(lib, ec)) usage(std::string("GPUMEM_LIBRARY=") + lib + " is not a file (unset it to use the libgpumem.so beside gpumem)");
  }
}

}  // namespace gpumem::cli
