// `gpumem run` as a user (and a careless or hostile one) drives it: options, environment, signals, what
// is left behind. The built binary runs as a child process; the "program" is a shell command or cat.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "monitor/run_gpumem.hpp"

namespace {

using gpumem::testing::exec_gpumem;

namespace fs = std::filesystem;
using gpumem::testing::run_gpumem;
using gpumem::testing::slurp;

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("gpumem_run_cli_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Starts `gpumem args...` in its own session with TMPDIR in the test's directory; `before_exec` runs in
  // gpumem's process first (to start it with signals ignored or blocked, as nohup or a careless parent does).
  pid_t start(const std::vector<std::string>& args, const std::function<void()>& before_exec = {}) const {
    const pid_t pid = fork();
    if (pid == 0) {
      setsid();
      setenv("TMPDIR", dir_.c_str(), 1);
      if (before_exec) before_exec();
      exec_gpumem(args);
    }
    return pid;
  }
  static int wait_exit(pid_t pid) {
    const int st = wait_status(pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  static int wait_status(pid_t pid) {
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
  }
  std::vector<fs::path> scratch_dirs() const {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().rfind("gpumem-run-", 0) == 0) found.push_back(e.path());
    return found;
  }
  std::string marker() const { return (dir_ / "ran").string(); }

  fs::path dir_;
};

// The program a bad command line must never start: it leaves a marker file.
std::vector<std::string> with_marker_program(std::vector<std::string> run_words, const std::string& marker) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), run_words.begin(), run_words.end());
  for (const char* w : {"--", "sh", "-c"}) args.push_back(w);
  args.push_back("touch " + marker);
  return args;
}

TEST_F(RunCli, UnknownOrMalformedOptionsAreUsageErrorsBeforeTheProgramRuns) {
  const std::vector<std::vector<std::string>> bad = {
      {"--limt=1GiB"}, {"--quite"}, {"-x"}, {"--limit"}, {"--limit", ""}, {"--limit="}, {"--limit", "lots"},
      {"--limit", "0"}, {"--limit", "1KiB"}, {"--fraction", "1e-300"}, {"--fraction", "7"}, {"--fraction", "0.5x"},
      {"--backend", "bogus"}, {"--limit", "1GiB", "--fraction", "0.5"}, {"--limit", "1GiB", "--limit", "2GiB"},
      {"--report", (fs::path("/nonexistent-gpumem-dir") / "r.json").string()}, {"--report", "/"}};
  for (const auto& words : bad) {
    std::string shown;
    for (const auto& w : words) shown += "[" + w + "] ";
    const auto r = run_gpumem(with_marker_program(words, marker()), {});
    EXPECT_EQ(r.status, 2) << shown << r.err;
    EXPECT_FALSE(fs::exists(marker())) << shown << "ran the program";
    EXPECT_EQ(r.err.rfind("gpumem run: ", 0), 0u) << shown << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << shown << r.err;
  }
  // A share of the device given to --limit: the message names --fraction.
  const auto share = run_gpumem(with_marker_program({"--limit", "0.5"}, marker()), {});
  EXPECT_NE(share.err.find("use --fraction 0.5"), std::string::npos) << share.err;
  // `--report` followed by "--" is a missing value, never a file named "--".
  const auto r = run_gpumem({"run", "--report", "--", "true"}, {});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("--report needs a value"), std::string::npos) << r.err;
}

TEST_F(RunCli, BadGpumemVariablesAreRefusedBeforeTheProgramRuns) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"GPUMEM_LIMIT", "garbage"}, {"GPUMEM_LIMIT", "0"},        {"GPUMEM_LIMIT", "100"},
      {"GPUMEM_FRACTION", "7"},    {"GPUMEM_FRACTION", "1e-300"}, {"GPUMEM_BACKEND", "bogus"},
      {"GPUMEM_SIM_CAPACITY", "x"}, {"GPUMEM_LIBRARY", "/nonexistent/libgpumem.so"},
      {"GPUMEM_CUDA_PAGE_MIB", "0"}, {"GPUMEM_CUDA_PAGE_MIB", "2MiB"}, {"GPUMEM_CUDA_PAGE_MIB", "-4"},
      {"GPUMEM_MAP_AHEAD", "2"},  {"GPUMEM_MAP_AHEAD", "maybe"}, {"GPUMEM_CONTROL", "nope"},
      {"GPUMEM_CONTROL", "offf"}, {"GPUMEM_COOPERATIVE", "fals"}, {"GPUMEM_COOPERATIVE", " 0"},
      {"GPUMEM_TRACE", (dir_ / "missing" / "t.jsonl").string()}, {"GPUMEM_TRACE", dir_.string()}};
  for (const auto& [name, value] : bad) {
    // The sim backend too: a switch only the cuda backend reads is refused all the same.
    for (const char* backend : {"cuda", "sim"}) {
      const auto r = run_gpumem(with_marker_program({}, marker()), {{name, value}, {"GPUMEM_BACKEND", backend}});
      EXPECT_EQ(r.status, 2) << name << "=" << value << ": " << r.err;
      EXPECT_FALSE(fs::exists(marker())) << name << "=" << value;
      EXPECT_EQ(r.err.rfind("gpumem run: " + name, 0), 0u) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      if (name == "GPUMEM_BACKEND") break;
    }
  }
  // Every spelling of on and off, in any case.
  for (const char* value : {"0", "1", "off", "ON", "No", "yes", "TRUE", "false"}) {
    const auto r = run_gpumem(
        with_marker_program({"-q"}, marker()),
        {{"GPUMEM_BACKEND", "sim"}, {"GPUMEM_CONTROL", value}, {"GPUMEM_COOPERATIVE", value}, {"GPUMEM_MAP_AHEAD", value}});
    EXPECT_EQ(r.status, 0) << value << ": " << r.err;
    EXPECT_TRUE(fs::exists(marker())) << value;
    fs::remove(marker());
  }
  // A trace in a directory that exists is the program's to write.
  EXPECT_EQ(run_gpumem(with_marker_program({"-q"}, marker()), {{"GPUMEM_TRACE", (dir_ / "t.jsonl").string()}}).status, 0);
  EXPECT_TRUE(fs::exists(marker()));
  fs::remove(marker());
  // "none" is how no limit is spelled, and --limit overrides the environment.
  EXPECT_EQ(run_gpumem(with_marker_program({"--limit", "none"}, marker()), {{"GPUMEM_LIMIT", "0"}}).status, 0);
  EXPECT_TRUE(fs::exists(marker()));
}

TEST_F(RunCli, ExitStatusAndArgumentsPassThroughVerbatim) {
  EXPECT_EQ(run_gpumem({"run", "-q", "--", "sh", "-c", "exit 7"}, {}).status, 7);
  const auto r = run_gpumem({"run", "-q", "--", "sh", "-c", "echo \"$@\"", "sh", "--limit", "x", "--", "-q"}, {});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "--limit x -- -q\n");
}

// A program that cannot be started: 127 when it (or its #! interpreter) is not found, 126 when it cannot
// be run, as a shell says, with a sentence that names what is missing.
TEST_F(RunCli, ProgramsThatCannotStartExitAsTheShellSays) {
  const fs::path script = dir_ / "script.py", plain = dir_ / "plain.py", crlf = dir_ / "crlf.sh";
  std::ofstream(script) << "#!/nonexistent/python3 -u\nprint(1)\n";
  std::ofstream(plain) << "print(1)\n";
  std::ofstream(crlf) << "#!/bin/sh\r\necho x\r\n";  // saved with Windows line endings
  fs::permissions(script, fs::perms::owner_all);
  fs::permissions(crlf, fs::perms::owner_all);
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"/nonexistent/program", 127, "cannot run '/nonexistent/program': no such file"},
      {"gpumem-no-such-program", 127, "cannot run 'gpumem-no-such-program': no such program in PATH"},
      {script.string(), 127, "cannot run '" + script.string() + "': its interpreter /nonexistent/python3 (on its #! line) does not exist"},
      {plain.string(), 126, "cannot run '" + plain.string() + "': Permission denied"},
      {dir_.string(), 126, "cannot run '" + dir_.string() + "': it is a directory"},
      {crlf.string(), 127, "cannot run '" + crlf.string() + "': its #! line ends in a carriage return (Windows line "
                           "endings), so the kernel looks for an interpreter named '/bin/sh\\r'; convert the file (dos2unix)"},
      {"", 127, "cannot run '': the program's name is empty"}};
  for (const auto& [program, code, said] : cases) {
    const auto r = run_gpumem({"run", "--", program}, {});
    EXPECT_EQ(r.status, code) << program << ": " << r.err;
    EXPECT_EQ(r.err, "gpumem run: " + said + "\n");
  }
}

// `gpumem --json run`: the hint names what run has, not a `gpumem run --json` it refuses.
TEST_F(RunCli, SummaryOptionsBeforeRunGetAHintThatWorks) {
  const auto r = run_gpumem({"--json", "run", "--", "true"}, {});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.find("gpumem run --json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpumem run --report FILE"), std::string::npos) << r.err;
  const auto ps = run_gpumem({"--json", "ps"}, {});
  EXPECT_NE(ps.err.find("gpumem ps --json"), std::string::npos) << ps.err;
}

// PyTorch's allocator settings do not apply under gpumem: said once on stderr (not with -q, not when unset).
TEST_F(RunCli, PytorchAllocatorSettingsAreNamedAsNotApplying) {
  const auto told =
      run_gpumem({"run", "--", "sh", "-c", "echo ran"}, {{"PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"}});
  EXPECT_EQ(told.status, 0) << told.err;
  EXPECT_EQ(told.out, "ran\n");
  EXPECT_NE(told.err.find("gpumem run: PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True' configures PyTorch's own "
                          "allocator, which gpumem replaces in this program: its settings do not apply"),
            std::string::npos) << told.err;
  EXPECT_EQ(std::count(told.err.begin(), told.err.end(), '\n'), 1) << told.err;
  const auto newer = run_gpumem({"run", "--", "true"}, {{"PYTORCH_ALLOC_CONF", "expandable_segments:True"}});
  EXPECT_NE(newer.err.find("gpumem run: PYTORCH_ALLOC_CONF='expandable_segments:True' configures"), std::string::npos)
      << newer.err;  // its newer name
  const auto quiet = run_gpumem({"run", "-q", "--", "true"}, {{"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"}});
  EXPECT_EQ(quiet.status, 0);
  EXPECT_EQ(quiet.err, "");
  EXPECT_EQ(run_gpumem({"run", "--", "true"}, {{"PYTORCH_CUDA_ALLOC_CONF", ""}}).err, "");
}

// The summary reads the reports the program's processes leave in $GPUMEM_REPORT_DIR (gpumem_torch writes
// them at exit); here the program writes them itself. Memory held for other streams gets a line of its own,
// and so does the time the driver calls took.
TEST_F(RunCli, SummaryNamesMemoryHeldForOtherStreams) {
  const std::string write_reports =
      "echo '{\"pid\": 11, \"devices\": {\"0\": {\"peak_requested\": 1048576000, \"peak_allocated\": "
      "1048576000, \"peak_active\": 1258291200, \"peak_reserved\": 1283457024, \"num_ooms\": 0, "
      "\"driver_calls\": 12345, \"driver_us\": 348250}}}' > "
      "\"$GPUMEM_REPORT_DIR/report-11.json\"; "
      "echo '{\"pid\": 12, \"devices\": {\"0\": {\"peak_requested\": 1048576, \"peak_allocated\": 1048576, "
      "\"peak_active\": 1048576, \"peak_reserved\": 2097152, \"num_ooms\": 1}}}' > "
      "\"$GPUMEM_REPORT_DIR/report-12.json\"";
  const auto r = run_gpumem({"run", "--", "sh", "-c", write_reports}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("pid 11 device 0: peak live 1000.00 MiB, peak reserved 1.20 GiB (1.224x), 0 OOMs"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pid 11 device 0: freed blocks that other streams still used kept up to 1.17 GiB in use "
                       "(peak reserved 1.020x that)"),
            std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pid 12 device 0: peak live 1.00 MiB, peak reserved 2.00 MiB (2.000x), 1 OOMs"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pid 12 device 0: freed blocks"), std::string::npos) << r.err;  // none held: no line
  // The driver calls' cost, where the report has them (not for pid 12: no such keys).
  EXPECT_NE(r.err.find("pid 11 device 0: 12,345 driver calls to create, map and unmap pages took 348.2 ms of the "
                       "program's threads"),
            std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pid 12 device 0: 0 driver calls"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 4) << r.err;
}

// A relative TMPDIR gives the program absolute PYTHONPATH and GPUMEM_REPORT_DIR (it may change directory);
// one that is not a directory is named before the program starts.
TEST_F(RunCli, TemporaryDirectoryIsAbsoluteAndABadTmpdirIsNamed) {
  fs::create_directories(dir_ / "rel");
  const fs::path seen = dir_ / "seen";
  const pid_t pid = start({"run", "-q", "--", "sh", "-c", "cd / && echo \"$PYTHONPATH $GPUMEM_REPORT_DIR\" > " + seen.string()},
                          [this] {
                            if (chdir(dir_.c_str()) != 0) _exit(126);
                            setenv("TMPDIR", "rel", 1);
                          });
  ASSERT_EQ(wait_exit(pid), 0);
  const std::string paths = slurp(seen.string());
  const std::string prefix = (dir_ / "rel" / "gpumem-run-").string();
  EXPECT_EQ(paths.rfind(prefix, 0), 0u) << paths;
  EXPECT_NE(paths.find(" " + prefix), std::string::npos) << paths;
  for (const std::string& bad : std::vector<std::string>{"/nonexistent-gpumem-tmp", (dir_ / "seen").string()}) {
    const auto r = run_gpumem(with_marker_program({}, marker()), {{"TMPDIR", bad}});
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err, "gpumem run: TMPDIR=" + bad + " is not a directory (gpumem run makes its temporary directory there)\n");
    EXPECT_FALSE(fs::exists(marker()));
  }
  // A ':' would split the directory on the program's PYTHONPATH, and gpumem would silently not load.
  const fs::path colon = dir_ / "a:b";
  fs::create_directories(colon);
  const auto r = run_gpumem(with_marker_program({}, marker()), {{"TMPDIR", colon.string()}});
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_NE(r.err.find("has a ':' in its path, which PYTHONPATH cannot hold"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(marker()));
  // An empty TMPDIR means unset, as for mkstemp and Python.
  EXPECT_EQ(run_gpumem({"run", "-q", "--", "true"}, {{"TMPDIR", ""}}).status, 0);
}

// Without "--", the words after the program are the program's: its own --help, a "--" or "--limit" among
// its arguments (the parser read them as gpumem's and printed gpumem's help or refused them).
TEST_F(RunCli, WithoutDoubleDashTheProgramsWordsAreItsOwn) {
  auto r = run_gpumem({"run", "-q", "sh", "-c", "echo \"$@\"", "sh", "--help", "--", "a", "--limit"}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "--help -- a --limit\n");
  r = run_gpumem({"run", "--limit", "none", "-q", "sh", "-c", "echo $GPUMEM_LIMIT"}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "none\n");
  EXPECT_EQ(run_gpumem({"run", "--help"}, {}).status, 0);  // run's own help still works
}

// The report directory is the program's too: anything it leaves there that is not a report is left out with
// a line, and the program's status stands (a string pid made gpumem exit 1 with a JSON library's error).
TEST_F(RunCli, AMalformedReportIsLeftOutNotFatal) {
  const auto r = run_gpumem({"run", "--", "sh", "-c",
                             "echo '{\"pid\": \"x\", \"devices\": {}}' > \"$GPUMEM_REPORT_DIR/report-1.json\""}, {});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "gpumem run: report-1.json in its report directory is not a report gpumem wrote: left out\n");
}

// GPUMEM_TRACE is made absolute, as --report: the program may change its directory before it writes.
TEST_F(RunCli, ARelativeTracePathIsMadeAbsolute) {
  const fs::path seen = dir_ / "seen";
  const pid_t pid = start({"run", "-q", "--", "sh", "-c", "cd / && echo \"$GPUMEM_TRACE\" > " + seen.string()},
                          [this] {
                            if (chdir(dir_.c_str()) != 0) _exit(126);
                            setenv("GPUMEM_TRACE", "t.jsonl", 1);
                          });
  ASSERT_EQ(wait_exit(pid), 0);
  EXPECT_EQ(slurp(seen.string()), (dir_ / "t.jsonl").string() + "\n");
}

// python -E / -I ignore PYTHONPATH and -S skips site, so gpumem cannot load into that Python: one warning
// line (not with -q), and the program runs.
TEST_F(RunCli, PythonOptionsThatKeepGpumemOutAreWarnedOf) {
  const fs::path python = dir_ / "python3.12";
  {
    std::ofstream(python) << "#!/bin/sh\nexit 0\n";
  }
  fs::permissions(python, fs::perms::owner_all);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-E", "train.py"}, "-E ignores PYTHONPATH"}, {{"-I", "-c", "pass"}, "-I ignores PYTHONPATH"},
      {{"-bS", "-m", "x"}, "-S imports no site module"}, {{"-W", "ignore", "-E"}, "-E ignores"},
      {{"-u", "train.py", "-E"}, ""}, {{"-c", "pass", "-I"}, ""}, {{"-mE"}, ""}, {{"-Wdefault", "x.py"}, ""},
      {{"-X", "E", "x.py"}, ""}};
  for (const auto& [options, said] : cases) {
    std::vector<std::string> args = {"run", "--", python.string()};
    args.insert(args.end(), options.begin(), options.end());
    const auto r = run_gpumem(args, {});
    EXPECT_EQ(r.status, 0) << options[0] << ": " << r.err;
    if (said.empty()) {
      EXPECT_EQ(r.err, "") << options[0];
      continue;
    }
    EXPECT_EQ(r.err.rfind("gpumem run: warning: python3.12 " + said, 0), 0u) << r.err;
    EXPECT_NE(r.err.find("gpumem does not load into it"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    args.insert(args.begin() + 1, "-q");
    EXPECT_EQ(run_gpumem(args, {}).err, "") << options[0];
  }
}

// A careless parent's ignored SIGPIPE and blocked SIGTERM are not the program's; an ignored SIGINT (a
// background job of a script) stays ignored.
TEST_F(RunCli, TheProgramStartsWithDefaultSignalDispositionsAndAnEmptyMask) {
  const fs::path status = dir_ / "status";
  const pid_t pid = start({"run", "-q", "--", "sh", "-c", "cat /proc/self/status > " + status.string()}, [] {
    signal(SIGPIPE, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    sigprocmask(SIG_BLOCK, &term, nullptr);
  });
  ASSERT_EQ(wait_exit(pid), 0);
  const std::string text = slurp(status.string());
  EXPECT_NE(text.find("SigIgn:\t0000000000000002"), std::string::npos) << text;  // SIGINT (2) alone
  EXPECT_NE(text.find("SigBlk:\t0000000000000000"), std::string::npos) << text;
}

// Waits (20 s ceiling: sanitizer builds start slowly) until gpumem has started the program: its children
// are then two, the reaper of its scratch directory and the program. Returns them as /proc lists them.
std::string wait_for_program(pid_t gpumem) {
  const std::string path = "/proc/" + std::to_string(gpumem) + "/task/" + std::to_string(gpumem) + "/children";
  std::string children;
  auto count = [&] {
    std::istringstream ids(children);
    return std::distance(std::istream_iterator<std::string>(ids), std::istream_iterator<std::string>());
  };
  for (int waited = 0; waited < 20000 && ((children = slurp(path)), count() < 2); waited += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return children;
}

// gpumem dies of the signal that ended the program, as the program did (a shell shows 130 for Ctrl-C, and
// a loop around it stops), once its temporary directory is gone.
TEST_F(RunCli, InterruptStopsTheProgramAndGpumemDiesOfTheSameSignal) {
  using namespace std::chrono;
  // To the whole process group (as a terminal's Ctrl-C), and to gpumem alone (relayed).
  for (bool group : {true, false}) {
    const auto t0 = steady_clock::now();
    const pid_t pid = start({"run", "-q", "--", "sleep", "20"});
    ASSERT_FALSE(wait_for_program(pid).empty());
    ASSERT_EQ(group ? killpg(pid, SIGINT) : kill(pid, SIGINT), 0);
    const int st = wait_status(pid);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT) << (group ? "group" : "gpumem alone") << ": " << st;
    EXPECT_LT(steady_clock::now() - t0, seconds(10)) << "the program ran to its end";
    EXPECT_TRUE(scratch_dirs().empty());
  }
  const pid_t pid = start({"run", "-q", "--", "sleep", "20"});
  ASSERT_FALSE(wait_for_program(pid).empty());
  kill(pid, SIGTERM);
  const int st = wait_status(pid);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM) << st;
  // Removed by gpumem, or (had the signal come first) by its reaper a moment later.
  for (int waited = 0; waited < 5000 && !scratch_dirs().empty(); waited += 20)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(scratch_dirs().empty());
}

// A program that dumps core: gpumem dies of the same signal but writes no core of its own (the program's,
// in its own directory, is the one a user wants).
TEST_F(RunCli, ACoreDumpingSignalEndsGpumemWithoutACoreOfItsOwn) {
  const fs::path here = dir_ / "gpumem_cwd", there = dir_ / "program_cwd";
  fs::create_directories(here);
  fs::create_directories(there);
  const pid_t pid = start({"run", "-q", "--", "sh", "-c", "cd " + there.string() + " && kill -QUIT $$"}, [here] {
    const rlimit cores{RLIM_INFINITY, RLIM_INFINITY};
    setrlimit(RLIMIT_CORE, &cores);  // may fail where the hard limit is lower: then no core either way
    if (chdir(here.c_str()) != 0) _exit(126);
  });
  const int st = wait_status(pid);
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGQUIT) << st;
  EXPECT_FALSE(WIFSIGNALED(st) && WCOREDUMP(st)) << "gpumem dumped core";
  EXPECT_TRUE(fs::is_empty(here));
}

// Under nohup (SIGHUP ignored) a hangup, to the whole group or to gpumem alone, ends neither gpumem nor
// the program; likewise SIGINT and SIGQUIT for a background job of a non-interactive shell.
TEST_F(RunCli, SignalsIgnoredAtStartStayIgnoredForGpumemAndTheProgram) {
  const std::vector<std::vector<int>> cases = {{SIGHUP}, {SIGINT, SIGQUIT}};
  for (const auto& ignored : cases) {
    const std::string done = (dir_ / "done").string();
    fs::remove(done);
    const pid_t pid = start({"run", "-q", "--", "sh", "-c", "sleep 1; sleep 1; touch " + done}, [ignored] {
      for (int sig : ignored) signal(sig, SIG_IGN);
    });
    ASSERT_FALSE(wait_for_program(pid).empty());
    for (int sig : ignored) {
      killpg(pid, sig);
      kill(pid, sig);
    }
    EXPECT_EQ(wait_exit(pid), 0) << "signal " << ignored[0];
    EXPECT_TRUE(fs::exists(done)) << "signal " << ignored[0] << ": the program did not run to its end";
  }
}

// gpumem on a terminal of its own (a pseudo-terminal whose master end the test holds), in the terminal's
// foreground process group: writing ^C or ^\ to the master is a user's keystroke (a signal from the kernel,
// SI_KERNEL, to that whole group).
struct OnTerminal {
  pid_t pid = -1;
  int master = -1;
  ~OnTerminal() {
    if (master >= 0) close(master);
  }
};

OnTerminal start_on_terminal(const std::vector<std::string>& args, const fs::path& tmpdir) {
  OnTerminal t;
  t.master = posix_openpt(O_RDWR | O_NOCTTY);
  if (t.master < 0 || grantpt(t.master) != 0 || unlockpt(t.master) != 0) return t;
  const std::string slave = ptsname(t.master);
  t.pid = fork();
  if (t.pid == 0) {
    setsid();
    const int fd = open(slave.c_str(), O_RDWR);  // the session's controlling terminal, this group in front
    if (fd < 0) _exit(126);
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    setenv("TMPDIR", tmpdir.c_str(), 1);
    exec_gpumem(args);
  }
  return t;
}

// Waits (20 s ceiling) until a descendant of `root` runs `command` (its argv[0]).
bool wait_for_descendant(pid_t root, const std::string& command) {
  for (int waited = 0; waited < 20000; waited += 20) {
    std::vector<std::string> todo = {std::to_string(root)};
    while (!todo.empty()) {
      const std::string pid = todo.back();
      todo.pop_back();
      const std::string cmdline = slurp("/proc/" + pid + "/cmdline");
      if (pid != std::to_string(root) && cmdline.c_str() == command) return true;
      std::istringstream ids(slurp("/proc/" + pid + "/task/" + pid + "/children"));
      for (std::string id; ids >> id;) todo.push_back(id);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Ctrl-C and Ctrl-\ on the terminal reach a program that runs in a process group of its own (timeout,
// setsid -w): the terminal signals gpumem's group only, and gpumem passes them on.
TEST_F(RunCli, TerminalInterruptReachesAProgramInAGroupOfItsOwn) {
  using namespace std::chrono;
  const std::vector<std::pair<std::vector<std::string>, char>> cases = {
      {{"timeout", "20", "sleep", "20"}, '\x03'}, {{"setsid", "-w", "sleep", "20"}, '\x03'},
      {{"setsid", "-w", "sleep", "20"}, '\x1c'}};
  for (const auto& [program, key] : cases) {
    std::vector<std::string> args = {"run", "-q", "--"};
    args.insert(args.end(), program.begin(), program.end());
    const auto t0 = steady_clock::now();
    OnTerminal t = start_on_terminal(args, dir_);
    ASSERT_GT(t.pid, 0);
    ASSERT_TRUE(wait_for_descendant(t.pid, "sleep")) << program[0];
    std::this_thread::sleep_for(milliseconds(100));  // timeout's own handlers are set before it forks
    ASSERT_EQ(write(t.master, &key, 1), 1);
    const int code = wait_exit(t.pid);
    EXPECT_EQ(code, 128 + (key == '\x03' ? SIGINT : SIGQUIT)) << program[0];
    EXPECT_LT(steady_clock::now() - t0, seconds(10)) << program[0] << ": the program ran to its end";
  }
}

// In gpumem's own group, the program gets Ctrl-C from the terminal only, once.
TEST_F(RunCli, TerminalInterruptReachesAProgramInGpumemsGroupOnce) {
  const fs::path trapped = dir_ / "trapped";
  OnTerminal t = start_on_terminal(
      {"run", "-q", "--", "sh", "-c", "trap 'echo INT >> " + trapped.string() + "' INT; sleep 20; sleep 0.5"}, dir_);
  ASSERT_GT(t.pid, 0);
  ASSERT_TRUE(wait_for_descendant(t.pid, "sleep"));
  ASSERT_EQ(write(t.master, "\x03", 1), 1);
  EXPECT_EQ(wait_exit(t.pid), 0);
  EXPECT_EQ(slurp(trapped.string()), "INT\n");
}

TEST_F(RunCli, KilledGpumemTakesTheProgramAndItsDirectoryWithIt) {
  using namespace std::chrono;
  for (int sig : {SIGKILL, SIGQUIT}) {
    const pid_t pid = start({"run", "-q", "--", "sleep", "30"});
    const std::string children = wait_for_program(pid);
    ASSERT_FALSE(children.empty());
    EXPECT_EQ(scratch_dirs().size(), 1u);
    kill(pid, sig);
    wait_exit(pid);
    const auto deadline = steady_clock::now() + seconds(5);
    auto alive = [&] {
      std::istringstream ids(children);
      for (std::string id; ids >> id;) {
        const std::string stat = slurp("/proc/" + id + "/stat");
        if (!stat.empty() && stat.find(") Z") == std::string::npos) return true;
      }
      return false;
    };
    while ((alive() || !scratch_dirs().empty()) && steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(20));
    EXPECT_FALSE(alive()) << "signal " << sig << ": the program outlived gpumem";
    EXPECT_TRUE(scratch_dirs().empty()) << "signal " << sig << ": the temporary directory outlived gpumem";
  }
}

}  // namespace
