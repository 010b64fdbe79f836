// gpumem query / dmon / info as a user runs them, against the NVML test double: golden outputs for
// every format, errors and exit codes, the loop ended by SIGINT.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <regex>

#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::testing;

namespace {

const char* kAllFields =
    "timestamp,index,name,uuid,pci.bus_id,driver_version,pstate,temperature.gpu,utilization.gpu,utilization.memory,"
    "memory.total,memory.reserved,memory.used,memory.free,power.draw,power.limit,clocks.sm,clocks.mem,clocks.max.sm,"
    "fan.speed,persistence_mode,compute_mode";

std::map<std::string, std::string> fake_env(const std::string& scenario, const std::string& variant = "current") {
  return {{"GPUMEM_NVML_LIBRARY", fake_nvml_path(variant)},
          {"GPUMEM_FAKE_NVML_SCENARIO", std::string(GPUMEM_SOURCE_DIR) + "/tests/monitor/scenarios/" + scenario},
          {"CUDA_VISIBLE_DEVICES", ""},
          {"CUDA_DEVICE_ORDER", ""},
          {"TZ", "UTC"}};
}

RunResult run_ok(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  RunResult r = run_gpumem(args, env);
  EXPECT_EQ(r.status, 0) << r.err;
  return r;
}

}  // namespace

TEST(QueryCli, CsvAllFields) {
  auto r = run_ok({"query", std::string("--query-gpu=") + kAllFields, "--format=csv"}, fake_env("two_gpus.txt"));
  expect_golden("query_csv.txt", mask_timestamps(r.out));
  EXPECT_EQ(r.err, "");
}

TEST(QueryCli, CsvNoHeaderNoUnitsSelectedGpus) {
  auto r = run_ok({"query", std::string("--query-gpu=") + kAllFields, "--format=csv,noheader,nounits", "-i",
                   "1,GPU-8f1c2e4a-1111-2222-3333-444455556666"},
                  fake_env("two_gpus.txt"));
  expect_golden("query_csv_noheader_nounits.txt", mask_timestamps(r.out));
}

// nounits strips the units from the values only: nvidia-smi keeps them in the header (580, H200).
TEST(QueryCli, NoUnitsKeepsTheUnitsInTheHeader) {
  auto r = run_ok({"query", "--query-gpu=index,memory.used,power.draw", "--format=csv,nounits", "-i", "0"},
                  fake_env("two_gpus.txt"));
  EXPECT_EQ(r.out.substr(0, r.out.find('\n')), "index, memory.used [MiB], power.draw [W]") << r.out;
  EXPECT_EQ(r.out.find("MiB", r.out.find('\n')), std::string::npos) << r.out;
}

TEST(QueryCli, Json) {
  auto r = run_ok({"query", std::string("--query-gpu=") + kAllFields, "--format=json"}, fake_env("two_gpus.txt"));
  expect_golden("query_json.txt", mask_timestamps(r.out));
}

TEST(QueryCli, UnsupportedFieldsShowNA) {
  auto r = run_ok({"query", std::string("--query-gpu=") + kAllFields + ",temperature.memory,clocks.max.mem",
                   "--format=csv"},
                  fake_env("unsupported.txt"));
  expect_golden("query_unsupported.txt", mask_timestamps(r.out));
}

TEST(QueryCli, OldDriverHasNoReservedMemory) {
  auto r = run_ok({"query", "--query-gpu=index,memory.total,memory.reserved,memory.used,memory.free,pci.bus_id",
                   "--format=csv"},
                  fake_env("two_gpus.txt", "old"));
  expect_golden("query_old_driver.txt", r.out);
}

TEST(QueryCli, ComputeApps) {
  auto csv = run_ok({"query", "--query-compute-apps=pid,process_name,gpu_uuid,used_memory,gpu_bus_id,gpu_name",
                     "--format=csv"},
                    fake_env("two_gpus.txt"));
  expect_golden("query_apps_csv.txt", csv.out);
  EXPECT_EQ(csv.err, "GPU 2: process list unavailable: GPU is lost\n");
  auto json = run_ok({"query", "--query-compute-apps=pid,used_memory", "--format=json", "-i", "0"},
                     fake_env("two_gpus.txt"));
  EXPECT_EQ(json.out, "[{\"pid\":4242,\"used_memory\":12288},{\"pid\":4343,\"used_memory\":8000}]\n");
}

TEST(QueryCli, ComputeAppsStrideOfEveryDriverGeneration) {
  for (const char* variant : {"current", "old", "cc"}) {
    auto r = run_ok({"query", "--query-compute-apps=pid,used_memory", "--format=csv,noheader", "-i", "0"},
                    fake_env("two_gpus.txt", variant));
    EXPECT_EQ(r.out, "4242, 12288 MiB\n4343, 8000 MiB\n") << variant;
  }
}

TEST(QueryCli, UnknownFieldIsUsageError) {
  auto r = run_gpumem({"query", "--query-gpu=index,foo", "--format=csv"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpumem query: Field \"foo\" is not a valid field to query.\n");
  auto f = run_gpumem({"query", "--query-gpu=index", "--format=xml"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(f.status, 2);
  auto empty = run_gpumem({"query", "--query-gpu=", "--format=csv"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(empty.status, 2);
  EXPECT_NE(empty.err.find("the field list is empty"), std::string::npos) << empty.err;
  // Plain gpumem's messages name no "summary" command (there is none).
  auto plain = run_gpumem({"--watch", "soon"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(plain.status, 2);
  EXPECT_EQ(plain.err.rfind("gpumem: ", 0), 0u) << plain.err;
}

TEST(QueryCli, NoSuchGpu) {
  auto r = run_gpumem({"query", "--query-gpu=index", "--format=csv", "-i", "7"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(r.status, 4);
  EXPECT_EQ(r.err, "gpumem query: No GPU matches id '7' (give an index, a UUID or a PCI bus id).\n");
}

TEST(QueryCli, WithoutNvmlOneSentenceAndExit4) {
  auto env = fake_env("two_gpus.txt");
  env["GPUMEM_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1";
  for (const char* cmd : {"query", "dmon", "info", "ps"}) {
    std::vector<std::string> args = {cmd};
    if (std::string(cmd) == "query") args.push_back("--query-gpu=index");
    auto r = run_gpumem(args, env);
    EXPECT_EQ(r.status, 4) << cmd;
    EXPECT_NE(r.err.find("could not be loaded"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  env["GPUMEM_NVML_LIBRARY"] = fake_nvml_path();
  env["GPUMEM_FAKE_NVML_SCENARIO"] = write_scenario("init-fails", "init_error 9\n");
  auto r = run_gpumem({"info"}, env);
  EXPECT_EQ(r.status, 4);
  EXPECT_EQ(r.err, "gpumem info: NVML could not be initialised: Driver Not Loaded (is the NVIDIA driver loaded?).\n");
}

TEST(QueryCli, UnwritableFileFailsBeforeSampling) {
  auto r = run_gpumem({"query", "--query-gpu=index", "--format=csv", "-f", "/nonexistent-dir/out.csv", "-l", "1"},
                      fake_env("two_gpus.txt"));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "gpumem query: cannot write /nonexistent-dir/out.csv: No such file or directory.\n");
}

TEST(QueryCli, LoopFlushesEverySampleAndStopsOnSigint) {
  std::string file = write_scenario("loop-out.csv", "");
  auto r = run_gpumem({"query", "--query-gpu=index,memory.used", "--format=csv", "-lms", "20", "-i", "0", "-f", file},
                      fake_env("two_gpus.txt"), 1500);  // room for a slow (sanitizer) start
  EXPECT_EQ(r.status, 130);
  std::string out = slurp(file);
  EXPECT_EQ(out.rfind("index, memory.used [MiB]\n0, 20480 MiB\n0, 20480 MiB\n", 0), 0u) << out;
  EXPECT_EQ(out.find("index", 1), std::string::npos) << "header printed once";
  EXPECT_EQ(out.back(), '\n');
}

TEST(QueryCli, LoopFlagForms) {
  auto bad = run_gpumem({"query", "--query-gpu=index", "-lms", "abc"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(bad.status, 2);
  auto bad2 = run_gpumem({"query", "--query-gpu=index", "-l", "0"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(bad2.status, 2);
  auto extra = run_gpumem({"query", "--query-gpu=index", "stray"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(extra.status, 2);
}

TEST(QueryCli, LoopPeriodsAreBoundedAndOneOfAKind) {
  // A period beyond -l's 10^7 s overflowed the schedule: samples in a busy loop.
  auto huge = run_gpumem({"query", "--query-gpu=index", "-lms", "10000000000000"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(huge.status, 2) << huge.out;
  auto both = run_gpumem({"query", "--query-gpu=index", "-l", "1", "--loop-ms", "100"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(both.status, 2) << both.out;
}

TEST(QueryCli, GpusByShortBusIdAndEachOnce) {
  // NVML writes an 8-digit domain; nvidia-smi and lspci users write "2a:00.0" or "0000:2A:00.0".
  for (const char* id : {"00000000:2A:00.0", "0000:2a:00.0", "0:2A:00.0", "2a:00.0"}) {
    auto r = run_ok({"query", "--query-gpu=index", "--format=csv,noheader", "-i", id}, fake_env("two_gpus.txt"));
    EXPECT_EQ(r.out, "1\n") << id;
  }
  auto twice = run_ok({"query", "--query-gpu=index", "--format=csv,noheader", "-i", "0,0,GPU-8f1c2e4a-1111-2222-3333-444455556666"},
                      fake_env("two_gpus.txt"));
  EXPECT_EQ(twice.out, "0\n");
  EXPECT_EQ(run_gpumem({"query", "--query-gpu=index", "-i", "2a:00"}, fake_env("two_gpus.txt")).status, 4);
}

// A GPU that stops answering blocks the NVML call for good: Ctrl-C still ends the program (after a short
// grace, or at once on a second signal), where it used to hang until SIGKILL.
TEST(QueryCli, AHungGpuDoesNotMakeTheProgramUnstoppable) {
  const std::string flag = write_scenario("hang-flag", "");
  auto env = fake_env("two_gpus.txt");
  env["GPUMEM_FAKE_NVML_SCENARIO"] = write_scenario(
      "hang", "driver 550.54.15\ncuda 12040\ngpu name=\"A\" uuid=GPU-a bus=00000000:18:00.0\n"
              "gpu name=\"B\" uuid=GPU-b bus=00000000:19:00.0 hang_file=" + flag + "\n");
  for (std::vector<std::string> args : {std::vector<std::string>{"dmon", "-d", "0.05"}, {"query", "--query-gpu=name", "-lms", "50"}}) {
    auto r = run_gpumem(args, env, 1500);
    EXPECT_EQ(r.status, 130) << args[0] << ": " << r.err;
  }
  std::remove(flag.c_str());
}

TEST(DmonCli, Golden) {
  auto r = run_ok({"dmon", "-c", "2", "-d", "0.01"}, fake_env("two_gpus.txt"));
  expect_golden("dmon.txt", r.out);
  auto sel = run_ok({"dmon", "-c", "1", "-s", "um", "-i", "0"}, fake_env("two_gpus.txt"));
  expect_golden("dmon_um.txt", sel.out);
  auto pcie = run_ok({"dmon", "-c", "1", "-s", "t", "-i", "0"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(pcie.out.substr(0, pcie.out.find('\n')), "# gpu  rxpci  txpci ");
  // One sample (-c 1) has a PCIe reading: it came before the background thread's first pass ("-").
  const std::string data = pcie.out.substr(pcie.out.rfind('\n', pcie.out.size() - 2) + 1);
  EXPECT_EQ(data.find('-'), std::string::npos) << pcie.out;
  auto bad = run_gpumem({"dmon", "-s", "x"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(bad.status, 2);
}

TEST(DmonCli, ViolationsAndEngines) {
  // pviol: share of the time since the previous reading (the double caps GPU 0 half the time).
  auto v = run_ok({"dmon", "-c", "2", "-d", "0.01", "-s", "uv"}, fake_env("health.txt"));
  expect_golden("dmon_violations.txt", v.out);
  // A driver without nvmlDeviceGetJpgUtilization: nvidia-smi of that driver has no jpg/ofa columns.
  auto old = run_ok({"dmon", "-c", "1", "-s", "u", "-i", "0"}, fake_env("health.txt", "old"));
  EXPECT_EQ(old.out.substr(0, old.out.find('\n')), "# gpu     sm    mem    enc    dec ");
}

TEST(DmonCli, StopsOnSigint) {
  // Interrupted once three samples are out (30 s ceiling: sanitizer builds start slowly).
  auto lines = [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') >= 2 + 3 * 2; };
  auto r = run_gpumem({"dmon", "-d", "0.02"}, fake_env("two_gpus.txt"), 30000, lines);
  EXPECT_EQ(r.status, 130);
  EXPECT_GE(std::count(r.out.begin(), r.out.end(), '\n'), 2 + 3 * 2);
}

// SIGTERM (a service manager, `timeout`) ends each loop as a shell reports it: 143, not Ctrl-C's 130;
// and -c 0 is no count (it ran for ever).
TEST(DmonCli, SigtermIs143AndCountZeroIsRefused) {
  auto two = [](const std::string& out) { return std::count(out.begin(), out.end(), '\n') >= 4; };
  for (std::vector<std::string> args : {std::vector<std::string>{"dmon", "-d", "0.02"},
                                        {"query", "--query-gpu=name", "-lms", "20"}, {"--json", "--watch", "0.02"}}) {
    auto r = run_gpumem(args, fake_env("two_gpus.txt"), 30000, two, SIGTERM);
    EXPECT_EQ(r.status, 128 + SIGTERM) << args[0] << ": " << r.err;
    EXPECT_FALSE(r.signaled) << args[0] << ": the loop must end by itself (its output flushed), not die of the signal";
  }
  auto zero = run_gpumem({"dmon", "-c", "0"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(zero.status, 2) << zero.out;
  EXPECT_NE(zero.err.find("-c needs a count >= 1"), std::string::npos) << zero.err;
}

// The scenario's PIDs may or may not exist on the machine that runs the test: that mark is masked here
// (InfoCli.GraphicsAndGoneProcesses checks it with PIDs it controls).
static std::string mask_gone(std::string s) {
  s = std::regex_replace(s, std::regex(" \\(no longer exists\\)"), "");
  return std::regex_replace(s, std::regex(R"("gone": (true|false))"), "\"gone\": <GONE>");
}

TEST(InfoCli, Golden) {
  auto r = run_ok({"info"}, fake_env("two_gpus.txt"));
  expect_golden("info.txt", mask_gone(mask_build_dir(r.out)));
  auto j = run_ok({"info", "--json"}, fake_env("two_gpus.txt"));
  expect_golden("info_json.txt", mask_gone(mask_build_dir(j.out)));
  auto env = fake_env("two_gpus.txt");
  env["CUDA_VISIBLE_DEVICES"] = "GPU-9a2d,0,5,1";
  env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  auto v = run_ok({"info"}, env);
  expect_golden("info_visible.txt", mask_gone(mask_build_dir(v.out)));
  auto old = run_ok({"info", "-i", "0"}, fake_env("two_gpus.txt", "old"));
  expect_golden("info_old_driver.txt", mask_gone(mask_build_dir(old.out)));
  // CUDA numbers every GPU: the one selected keeps the number it has among all of them.
  auto one = run_ok({"info", "-i", "1"}, fake_env("two_gpus.txt"));
  EXPECT_NE(one.out.find("cuda:1 -> GPU 1 (00000000:2A:00.0)"), std::string::npos) << one.out;
}

// info lists graphics processes as nvidia-smi does (it said "none" beside a 400 MiB graphics process),
// one line for a process in both lists, and marks one that NVML lists but that no longer exists.
TEST(InfoCli, GraphicsAndGoneProcesses) {
  const pid_t self = getpid();
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  auto env = fake_env("two_gpus.txt");
  env["GPUMEM_FAKE_NVML_SCENARIO"] = write_scenario(
      "info-graphics", "gpu name=\"A\" uuid=GPU-a used_mib=2000\n"
                       "proc gpu=0 pid=" + std::to_string(self) + " used_mib=400 type=graphics name=Xorg\n"
                       "proc gpu=0 pid=" + std::to_string(self) + " used_mib=400 name=Xorg\n"
                       "proc gpu=0 pid=" + std::to_string(gone) + " used_mib=100 type=graphics name=gone\n");
  auto r = run_ok({"info"}, env);
  EXPECT_NE(r.out.find(std::to_string(self) + " C+G Xorg 400 MiB\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::to_string(gone) + " G gone 100 MiB (no longer exists)\n"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("processes    none"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(run_ok({"info", "--json"}, env).out);
  const auto& procs = doc["gpus"][0]["processes"];
  ASSERT_EQ(procs.size(), 2u) << procs;
  EXPECT_EQ(procs[0]["type"], "C+G");
  EXPECT_EQ(procs[0]["gone"], false);
  EXPECT_EQ(procs[1]["type"], "G");
  EXPECT_EQ(procs[1]["gone"], true);
}

TEST(QueryCli, HelpQueryGpuInNvidiaSmiLayoutCoversEveryField) {
  auto r = run_ok({"query", "--help-query-gpu"}, fake_env("two_gpus.txt"));
  EXPECT_EQ(r.out.rfind("List of valid properties to query for the switch \"--query-gpu=\":\n\n\"timestamp\"\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\"name\" or \"gpu_name\"\n"), std::string::npos);
  EXPECT_EQ(r.out.find("No description."), std::string::npos);
  auto apps = run_ok({"query", "--help-query-compute-apps"}, fake_env("two_gpus.txt"));
  EXPECT_NE(apps.out.find("\"used_gpu_memory\" or \"used_memory\"\n"), std::string::npos) << apps.out;
}

TEST(QueryCli, NvidiaSmiRemainingFieldsFormattedAsItDoes) {
  auto r = run_ok({"query",
                   "--query-gpu=vbios_version,serial,display_mode,display_active,pcie.link.gen.current,pcie.link.gen.max,"
                   "pcie.link.width.current,pcie.link.width.max,enforced.power.limit,power.default_limit,power.min_limit,"
                   "power.max_limit,clocks_throttle_reasons.active,clocks_event_reasons.gpu_idle,"
                   "clocks_event_reasons.sw_power_cap,ecc.errors.corrected.aggregate.total",
                   "--format=csv"},
                  fake_env("two_gpus.txt"));
  expect_golden("query_nvidia_smi_fields.txt", r.out);
}

TEST(QueryCli, RetiredPages) {
  auto r = run_ok({"query", "--query-gpu=index,retired_pages.sbe,retired_pages.double_bit.count,retired_pages.pending",
                   "--format=csv"},
                  fake_env("health.txt"));
  expect_golden("query_retired_pages.txt", r.out);
  auto j = run_ok({"query", "--query-gpu=retired_pages.single_bit_ecc.count,retired_pages.pending", "--format=json", "-i", "0"},
                  fake_env("health.txt"));
  EXPECT_EQ(j.out, "[{\"retired_pages.single_bit_ecc.count\":2,\"retired_pages.pending\":\"Yes\"}]\n");
}
