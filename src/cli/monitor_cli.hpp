// Glue shared by the monitor commands (info, query, dmon, ps, kill): maps the monitor's error kinds
// to exit codes with one sentence on stderr, and parses nvidia-smi style durations.
#pragma once
#include <cstdio>
#include <exception>
#include <string>

#include "cli/exit_codes.hpp"
#include "monitor/common.hpp"
#include "nvml/library.hpp"

namespace gpumem::cli {

// `name`: the subcommand as typed, "" for plain `gpumem` (its messages begin "gpumem: ").
template <class Body>
int run_monitor_command(const char* name, Body body) {
  const std::string who = *name ? std::string("gpumem ") + name : "gpumem";
  try {
    return body();
  } catch (const monitor::UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kExitUsage;
  } catch (const nvml::NvmlUnavailableError& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kExitNoDevice;
  } catch (const monitor::NoSuchGpuError& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return kExitNoDevice;
  }
}

// Seconds as given on the command line ("2", "0.5") to a positive count of milliseconds.
inline long parse_seconds_ms(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size() && v > 0 && v < 1e7) return static_cast<long>(v * 1000 + 0.5) > 0 ? static_cast<long>(v * 1000 + 0.5) : 1;
  } catch (const std::exception&) {
  }
  throw monitor::UsageError(flag + " needs a positive number of seconds below 10000000, not '" + text + "'.");
}

}  // namespace gpumem::cli
