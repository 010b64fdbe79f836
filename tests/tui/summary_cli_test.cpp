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

  auto full = run_gpumem({"--json", "--full"}, env());  // the document libgpumem_monitor.so returns
  ASSERT_EQ(full.status, 0) << full.err;
  auto f = nlohmann::json::parse(full.out);
  EXPECT_EQ(f["schema"], 1);
  EXPECT_EQ(f["gpus"][0]["memory_used_bytes"], 20480ull << 20);
  EXPECT_EQ(f["gpus"][0]["processes"][1]["used_memory_bytes"], 8000ull << 20);
  EXPECT_EQ(run_gpumem({"--full"}, env()).status, 2);
  // The summary's flags before a command were silently ignored (`gpumem --json info` printed text).
  auto misplaced = run_gpumem({"--json", "info"}, env());
  EXPECT_EQ(misplaced.status, 2);
  EXPECT_NE(misplaced.err.find("gpumem info --json"), std::string::npos) << misplaced.err;
}

// Names that are not UTF-8, or carry escape codes, reach neither the terminal raw nor break --json.
TEST(SummaryCli, HostileProcessNamesStayPrintableAndJsonStaysValid) {
  auto e = env();
  e["GPUMEM_FAKE_NVML_SCENARIO"] = write_scenario(
      "hostile-names", "driver 550.54.15\ncuda 12040\ngpu name=\"GPU \xe9\xff\" uuid=GPU-1 total_mib=1000 used_mib=10\n"
                       "proc gpu=0 pid=4242 used_mib=5 name=py\xff\xfethon\x1b[31mred\n");
  for (std::vector<std::string> args : {std::vector<std::string>{"--json"}, {"--json", "--full"}}) {
    auto r = run_gpumem(args, e);
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(nlohmann::json::accept(r.out)) << r.out;
  }
  auto q = run_gpumem({"query", "--query-gpu=name", "--format=json"}, e);
  ASSERT_EQ(q.status, 0) << q.err;
  EXPECT_TRUE(nlohmann::json::accept(q.out)) << q.out;
  auto apps = run_gpumem({"query", "--query-compute-apps=pid,process_name", "--format=json"}, e);
  ASSERT_EQ(apps.status, 0) << apps.err;
  EXPECT_TRUE(nlohmann::json::accept(apps.out)) << apps.out;
  auto info = run_gpumem({"info"}, e);
  EXPECT_EQ(info.out.find('\033'), std::string::npos) << info.out;
}

// Screens in a pipe: one "[0] " line each, and no repaint codes (a terminal gets those, a file does not).
static size_t screens(const std::string& out) {
  size_t n = out.rfind("[0] ", 0) == 0 ? 1 : 0;
  for (size_t at = out.find("\n[0] "); at != std::string::npos; at = out.find("\n[0] ", at + 1)) ++n;
  return out.find('\033') == std::string::npos ? n : 0;
}

TEST(SummaryCli, WatchRepeatsUntilInterrupted) {
  // Interrupted once three screens are out (30 s ceiling: sanitizer builds start slowly).
  auto r = run_gpumem({"--watch", "0.1"}, env(), 30000, [](const std::string& out) { return screens(out) >= 3; });
  EXPECT_EQ(r.status, 130);
  EXPECT_GE(screens(r.out), 3u) << "one screen per interval until Ctrl-C";
  EXPECT_EQ(run_gpumem({"--watch", "soon"}, env()).status, 2);
}
