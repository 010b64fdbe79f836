// `gpumem` with no subcommand against the NVML test double: one line per GPU with its processes, JSON,
// --watch repeating until Ctrl-C, no colour when stdout is not a terminal.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::testing;

namespace {
std::map<std::string, std::string> env() {
  return {{"GPUMEM_NVML_LIBRARY", fake_nvml_path()},
          {"GPUMEM_FAKE_NVML_SCENARIO", std::string(GPUMEM_SOURCE_DIR) + "/tests/monitor/scenarios/two_gpus.txt"},
          {"GPUMEM_DEV_DIR", "/nonexistent"}};
}
}  // namespace

TEST(SummaryCli, OneLinePerGpuWithProcessesNoColourInPipes) {
  auto r = run_gpumem({}, env());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.find('\033'), std::string::npos);
  EXPECT_NE(r.out.find("[0] NVIDIA H100 80GB HBM3  | 61C,  97 % |  20480 /  81559 MB | [gone]:?/4242(12288M)"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2] GPU                    | GPU is lost"), std::string::npos) << r.out;
}

TEST(SummaryCli, JsonHasGpusAndProcesses) {
  auto r = run_gpumem({"--json"}, env());
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["gpus"].size(), 3u);
  EXPECT_EQ(j["gpus"][0]["memory_used_mib"], 20480);
  EXPECT_EQ(j["gpus"][0]["processes"][0]["pid"], 4242);
  EXPECT_EQ(j["gpus"][2]["error"], "GPU is lost");
}

TEST(SummaryCli, WatchRepeatsUntilInterrupted) {
  auto r = run_gpumem({"--watch", "0.1"}, env(), 450);
  EXPECT_EQ(r.status, 130);
  size_t screens = 0;
  for (size_t at = r.out.find("\033[H\033[2J"); at != std::string::npos; at = r.out.find("\033[H\033[2J", at + 1)) ++screens;
  EXPECT_GE(screens, 2u) << "one screen per interval until Ctrl-C";  // sanitizer builds start slowly
  EXPECT_EQ(run_gpumem({"--watch", "soon"}, env()).status, 2);
}
