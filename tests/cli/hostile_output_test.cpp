// What a hostile user can put in gpumem's output: process names and trace headers with terminal escapes,
// newlines and bytes that are not UTF-8 (text stays inert, JSON stays valid); and what a full disk does
// to every command (exit 1 and one sentence, never a silent 0). Run against the NVML test double.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gpumem/printable.hpp"
#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"

namespace {

namespace fs = std::filesystem;
using namespace gpumem::testing;

const std::string kEvilName = "evil\x1b[2J\nfake line\xff\xc2\x9b" "31m";

// `sleep 300` whose argv[0] is kEvilName, so /proc/PID/cmdline carries it.
class EvilProcess {
 public:
  EvilProcess() {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sleep", kEvilName.c_str(), "300", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 500 && slurp("/proc/" + std::to_string(pid_) + "/cmdline").find("evil") == std::string::npos; ++i)
      usleep(2000);
  }
  ~EvilProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  int pid() const { return pid_; }

 private:
  pid_t pid_;
};

std::map<std::string, std::string> nvml_env(const std::string& scenario) {
  return {{"GPUMEM_NVML_LIBRARY", fake_nvml_path()},
          {"GPUMEM_FAKE_NVML_SCENARIO", write_scenario(::testing::UnitTest::GetInstance()->current_test_info()->name(), scenario)}};
}

// No raw control character but the line ends; no byte that is not UTF-8 (checked by the JSON parser).
void expect_inert_text(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    EXPECT_FALSE((c < 0x20 && c != '\n') || c == 0x7f) << "raw control byte " << int(c) << " at " << i << " in:\n" << text;
  }
  EXPECT_EQ(text.find("\nfake line"), std::string::npos) << "a name forged an output line:\n" << text;
  EXPECT_NO_THROW((void)nlohmann::json(text).dump()) << "text output is not UTF-8";
}

TEST(Printable, EscapesEveryControlCharacterAndEveryByteThatIsNotUtf8) {
  EXPECT_EQ(gpumem::printable("plain name ÿ 日本 🙂"), "plain name ÿ 日本 🙂");
  EXPECT_EQ(gpumem::printable(std::string("a\nb\tc\rd\x1b[2J\x7f\x01", 13)), "a\\nb\\tc\\rd\\e[2J\\x7f\\x01");
  EXPECT_EQ(gpumem::printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(gpumem::printable("\xc2\x9b" "31m"), "\\x9b31m");  // C1 CSI in UTF-8
  for (const char* bad : {"\xff", "\x80", "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xc3", "\xe6\x97"}) {
    const std::string out = gpumem::printable(bad);
    EXPECT_EQ(out.find_first_not_of("\\x0123456789abcdef"), std::string::npos) << out;
  }
  // Every byte value alone: at most 4 output characters, never a raw control byte.
  for (int b = 0; b < 256; ++b) {
    const std::string out = gpumem::printable(std::string(1, char(b)));
    for (unsigned char c : out) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << b;
  }
}

TEST(HostileOutput, PsAndKillShowHostileNamesEscapedAndKeepJsonValid) {
  EvilProcess evil;
  const std::string scenario = "gpu used_mib=10\nproc gpu=0 pid=" + std::to_string(evil.pid()) + " used_mib=5\n";
  auto ps = run_gpumem({"ps"}, nvml_env(scenario));
  ASSERT_EQ(ps.status, 0) << ps.err;
  expect_inert_text(ps.out);
  EXPECT_NE(ps.out.find("evil\\e[2J\\nfake line\\xff\\x9b31m"), std::string::npos) << ps.out;

  auto ps_json = run_gpumem({"ps", "--json"}, nvml_env(scenario));
  ASSERT_EQ(ps_json.status, 0) << ps_json.err;
  auto doc = nlohmann::json::parse(ps_json.out);
  EXPECT_NE(doc["processes"][0]["command"].get<std::string>().find("evil\x1b[2J\nfake line\xef\xbf\xbd"), std::string::npos);

  auto dry = run_gpumem({"kill", "--dry-run", std::to_string(evil.pid())}, nvml_env(scenario));
  EXPECT_EQ(dry.status, 0) << dry.err;
  expect_inert_text(dry.out);
  auto killed = run_gpumem({"kill", "--json", "--timeout", "5", std::to_string(evil.pid())}, nvml_env(scenario));
  EXPECT_EQ(killed.status, 0) << killed.err;
  auto kdoc = nlohmann::json::parse(killed.out);
  EXPECT_EQ(kdoc[0]["result"], "exited");
}

TEST(HostileOutput, ReplayHeaderAndFileNameWithHostileBytes) {
  const fs::path dir = fs::temp_directory_path() / ("gpumem_hostile_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path trace = dir / "bad\xffname\x1b[2J.jsonl";
  std::ofstream(trace) << R"({"format": "gpumem-trace", "version": 1, "source": "evil\u001b[2J\nfake line", "device": "x\u0007"})"
                       << "\n" << R"({"t": 1, "op": "alloc", "addr": 4096, "size": 512, "stream": 0})" << "\n";
  auto text = run_gpumem({"replay", trace.string()}, {});
  EXPECT_EQ(text.status, 0) << text.err;
  expect_inert_text(text.out);
  EXPECT_NE(text.out.find("recorded by evil\\e[2J\\nfake line on x\\x07"), std::string::npos) << text.out;
  auto json = run_gpumem({"replay", "--json", trace.string()}, {});
  EXPECT_EQ(json.status, 0) << json.err;
  EXPECT_NO_THROW(nlohmann::json::parse(json.out)) << json.out;
  fs::remove_all(dir);
}

TEST(KillEdges, StopIsReportedAsSignalledAndAncestorsAndKernelThreadsAreRefused) {
  EvilProcess target;
  auto stop = run_gpumem({"kill", "--json", "--signal", "STOP", std::to_string(target.pid())}, {});
  EXPECT_EQ(stop.status, 0) << stop.err;
  EXPECT_EQ(nlohmann::json::parse(stop.out)[0]["result"], "signalled") << stop.out;
  // The test's own parent is gpumem's grandparent (the shell above gpumem's caller, in real life).
  auto refused = run_gpumem({"kill", "--json", "--dry-run", "2", std::to_string(getppid())}, {});
  EXPECT_EQ(refused.status, 5);
  auto doc = nlohmann::json::parse(refused.out);
  ASSERT_EQ(doc.size(), 2u);
  for (const auto& o : doc) EXPECT_EQ(o["result"], "refused") << o.dump();
}

TEST(HostileOutput, UnknownCommandIsNamed) {
  auto r = run_gpumem({"frobnicate"}, {});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
}

// gpumem ARGS with stdout on /dev/full.
RunResult run_to_full_disk(const std::vector<std::string>& args, const std::map<std::string, std::string>& env) {
  char err_tmpl[] = "/tmp/gpumem-err-XXXXXX";
  const int err_fd = mkstemp(err_tmpl);
  const pid_t pid = fork();
  if (pid == 0) {
    const int full = open("/dev/full", O_WRONLY);
    dup2(full, 1);
    dup2(err_fd, 2);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> all = {gpumem_binary()};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  RunResult r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  close(err_fd);
  r.err = slurp(err_tmpl);
  unlink(err_tmpl);
  return r;
}

TEST(WriteErrors, EveryCommandFailsWhenItsOutputCannotBeWritten) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  EvilProcess target;
  const std::string scenario = "gpu used_mib=10\nproc gpu=0 pid=" + std::to_string(target.pid()) + " used_mib=5\n";
  const std::string trace = std::string(GPUMEM_SOURCE_DIR) + "/tests/data/lm_h200_gpumem.jsonl.gz";
  const std::vector<std::vector<std::string>> commands = {
      {"replay", trace}, {"replay", "--json", trace}, {"ps"}, {"ps", "--json"}, {"info"}, {"info", "--json"},
      {"query", "--query-gpu=name", "--format=csv"}, {"kill", "--dry-run", std::to_string(target.pid())},
      {"kill", "--json", "--dry-run", std::to_string(target.pid())}, {"--help"}, {"replay", "--help"}, {"--version"}};
  for (const auto& args : commands) {
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    const auto r = run_to_full_disk(args, nvml_env(scenario));
    EXPECT_EQ(r.status, 1) << shown << r.err;
    EXPECT_NE(r.err.find("cannot write"), std::string::npos) << shown << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << shown << "one sentence: " << r.err;
  }
}

}  // namespace
