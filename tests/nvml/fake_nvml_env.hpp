// Helpers for tests that run against the NVML test double: where its builds are, and scenario files.
#pragma once
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace gpumem::testing {

// variant: "current", "old" (no _v2/_v3 entry points) or "cc" (32-byte _v3 process records).
inline std::string fake_nvml_path(const std::string& variant = "current") {
  return std::string(GPUMEM_BINARY_DIR) + "/fake_nvml/libgpumem_fake_nvml_" + variant + ".so";
}

// The scenario files this test process wrote, removed when it exits (by this process only: a forked
// child that exits must not take its parent's files).
struct ScenarioFiles {
  pid_t owner = getpid();
  std::vector<std::string> paths;
  ~ScenarioFiles() {
    if (getpid() == owner)
      for (const auto& p : paths) std::remove(p.c_str());
  }
};
inline ScenarioFiles& scenario_files() {
  static ScenarioFiles files;
  return files;
}

// Writes `text` to a scenario file unique to this process and test name; returns its path.
inline std::string write_scenario(const std::string& name, const std::string& text) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/gpumem-scenario-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path) << text;
  scenario_files().paths.push_back(path);
  return path;
}

// Points the NVML loader of this process at the double with `scenario`.
inline void use_fake_nvml(const std::string& variant, const std::string& scenario_path) {
  setenv("GPUMEM_NVML_LIBRARY", fake_nvml_path(variant).c_str(), 1);
  setenv("GPUMEM_FAKE_NVML_SCENARIO", scenario_path.c_str(), 1);
}

}  // namespace gpumem::testing
