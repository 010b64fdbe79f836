// `gpumem top` as a user sees it: run inside tmux against the NVML test double (several GPUs, real child
// processes, a lost GPU, a GPU that stops answering), keys sent, screens captured and compared.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>

#include <fstream>
#include <regex>
#include <sstream>

#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"
#include "tui/tmux_session.hpp"
#ifdef CONTROL_TARGET
#include "control/target_process.hpp"
#endif

using namespace gpumem::testing;

namespace {

pid_t spawn_sleeper() {
  pid_t pid = fork();
  if (pid == 0) {
    execlp("sleep", "sleep", "600", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Until the child has exec'd, /proc shows it as this test binary (another command, another size).
  for (int waited = 0; waited < 5000; waited += 10) {
    std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
    std::string name;
    if (comm >> name && name == "sleep") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pid;
}

// A PID no process can have (past the kernel's pid_max): the ghost NVML lists.
pid_t no_such_pid() {
  std::ifstream f("/proc/sys/kernel/pid_max");
  long max = 0;
  return f >> max && max > 0 ? pid_t(max + 1) : pid_t(4194305);
}

bool reaped_within(pid_t pid, int ms) {
  for (int waited = 0; waited < ms; waited += 20) {
    int st = 0;
    if (waitpid(pid, &st, WNOHANG) == pid) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

struct Fixture {
  pid_t big = spawn_sleeper(), small = spawn_sleeper();
  pid_t ghost = no_such_pid();
  std::string scenario, pidfile;
  ~Fixture() {
    for (pid_t p : {big, small}) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    std::remove(pidfile.c_str());
  }
  // gpus: how many healthy GPUs before the lost one; extra: more scenario lines.
  Fixture(const std::string& name, int gpus, const std::string& extra = "") {
    std::string text = "driver 550.54.15\n";
    for (int i = 0; i < gpus; ++i)
      text += "gpu name=\"NVIDIA H100 80GB HBM3\" total_mib=81559 reserved_mib=512 used_mib=" +
              std::to_string(20480 - i * 1000) + " util_gpu=" + std::to_string(97 - i) + " temp=61 power_mw=412345\n";
    text += "gpu name=\"NVIDIA H100 80GB HBM3\" lost=1\n" + extra;
    text += "proc gpu=0 pid=" + std::to_string(big) + " used_mib=12288 sm=87\n";
    text += "proc gpu=1 pid=" + std::to_string(small) + " used_mib=4096\n";
    text += "proc gpu=0 pid=" + std::to_string(ghost) + " used_mib=800\n";
    scenario = write_scenario(name, text);
    pidfile = scenario + ".pid";
  }
  // gpumem runs in an inner shell that execs it (its PID lands in `pidfile`); the outer one prints the
  // exit status and stays, so the terminal's state after gpumem can be read.
  // env: more NAME=VALUE settings for gpumem (the tmux server does not pass this process's environment).
  std::string command(const std::string& args, const std::string& env = "") const {
    return "trap \"\" INT; sh -c \"echo \\$\\$ > " + pidfile + "; exec env " + env + " GPUMEM_NVML_LIBRARY=" + fake_nvml_path() +
           " GPUMEM_FAKE_NVML_SCENARIO=" + scenario + " GPUMEM_DEV_DIR=/nonexistent TERM=tmux-256color LANG=C.UTF-8 " +
           gpumem_binary() + " top " + args + "\"; echo EXIT=$?; stty -a | tr \" ;\" \"\\n\\n\" | grep -x -e -icanon -e -echo; sleep 60";
  }
  pid_t top_pid() const {
    std::ifstream f(pidfile);
    pid_t p = 0;
    f >> p;
    return p;
  }
  // Screen with what changes between runs masked: clock, PIDs, user, process age.
  std::string masked(std::string s) const {
    s = std::regex_replace(s, std::regex(R"(\d+:\d\d:\d\d)"), "<T>");
    s = std::regex_replace(s, std::regex(" +" + std::to_string(big) + "\\b"), " <BIG>");
    s = std::regex_replace(s, std::regex(" +" + std::to_string(small) + "\\b"), " <SMALL>");
    s = std::regex_replace(s, std::regex(" +" + std::to_string(ghost) + "\\b"), " <GHOST>");
    s = std::regex_replace(s, std::regex("\\b" + user_name() + " +"), "<USER> ");
    s = std::regex_replace(s, std::regex(R"( +\n)"), "\n");
    return s;
  }
  static std::string user_name() { return shell("id -un | tr -d '\\n'"); }
};

void expect_screen(const std::string& golden, const std::string& actual) {
  std::string path = std::string(GPUMEM_SOURCE_DIR) + "/tests/tui/golden/" + golden;
  if (const char* u = std::getenv("GPUMEM_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << actual;
    return;
  }
  std::string expected = slurp(path);
  if (expected == actual) return;
  // Only the lines that differ: a whole 200x50 screen does not fit in a CI log's tail.
  std::istringstream e(expected), a(actual);
  std::string diff;
  for (int line = 1; e || a; ++line) {
    std::string el, al;
    std::getline(e, el);
    std::getline(a, al);
    if (el != al) diff += "line " + std::to_string(line) + "\n  want: " + el + "\n  got:  " + al + "\n";
  }
  ADD_FAILURE() << "screen differs from " << path << ":\n" << diff;
}

}  // namespace

TEST(TopTmux, Screen80x24WithLostGpuThenSortHelpAndQuitRestoresTerminal) {
  Fixture f("top80", 2);
  TmuxSession t("80", 80, 24, f.command("-d 30"));  // one sample: the screen is the same every run
  ASSERT_TRUE(t.wait_for("GPU is lost")) << t.capture();
  ASSERT_TRUE(t.wait_for("history")) << t.capture();
  std::string screen = t.settled("q quit");
  for (const auto& line : std::vector<std::string>{"GPU-MEM", "ALLOC", "[gone:"}) EXPECT_NE(screen.find(line), std::string::npos) << screen;
  expect_screen("top_80x24.txt", f.masked(screen));
  t.keys("P");  // sort by pid: the ghost (past pid_max) goes last
  ASSERT_TRUE(t.wait_for("sort:pid")) << t.capture();
  screen = t.capture();
  EXPECT_LT(screen.find(std::to_string(std::min(f.big, f.small))), screen.find(std::to_string(f.ghost)));
  t.keys("h");
  ASSERT_TRUE(t.wait_for("gpumem top keys")) << t.capture();
  t.keys("x");
  ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
  EXPECT_TRUE(t.terminal_restored());
}

TEST(TopTmux, EightGpusAt200x50) {
  Fixture f("top200", 7);
  TmuxSession t("200", 200, 50, f.command("-d 30"));
  ASSERT_TRUE(t.wait_for("history")) << t.capture();
  std::string screen = t.settled("q quit");
  EXPECT_NE(screen.find("8 GPUs"), std::string::npos) << screen;
  EXPECT_NE(screen.find("CONTAINER"), std::string::npos) << screen;  // the wide screen shows every column
  // HOST (resident memory of `sleep`) differs between machines.
  screen = std::regex_replace(screen, std::regex(R"( [0-9.]+[BKMG]( +\d+:\d\d:\d\d))"), " <HOST>$1");
  expect_screen("top_200x50.txt", f.masked(screen));
  t.keys("C-c");
  EXPECT_EQ(t.wait_exit(), 130);
  EXPECT_TRUE(t.terminal_restored());
}

// More GPUs than lines: the rest are counted on one line and the process table stays in view (30 GPUs
// at 80x24 showed 22 of them and no process); a window a few lines high keeps its bottom line to the key
// hints (the table's header showed through behind them).
TEST(TopTmux, ManyGpusKeepTheProcessesInViewAndShortWindowsStayClean) {
  Fixture f("top30", 29);
  TmuxSession t("30", 80, 24, f.command("-d 30"));
  ASSERT_TRUE(t.wait_for("more GPUs")) << t.capture();
  std::string screen = t.settled("q quit");
  EXPECT_NE(screen.find("+"), std::string::npos) << screen;
  EXPECT_NE(screen.find("PID"), std::string::npos) << screen;
  EXPECT_NE(screen.find(std::to_string(f.big)), std::string::npos) << screen;
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
  for (int height : {3, 4}) {
    Fixture g("topshort" + std::to_string(height), 1);
    TmuxSession s("short" + std::to_string(height), 200, height, g.command("-d 30"));
    ASSERT_TRUE(s.wait_for("q quit")) << s.capture();
    const std::string shown = s.settled("q quit");
    const std::string last = shown.substr(shown.rfind("q quit"));
    EXPECT_EQ(last.substr(0, last.find_last_not_of(" \n") + 1),
              "q quit  h help  space select  c clear  l limit  s stop  k kill  M/P/U/T sort  f g filter")
        << shown;
    s.keys("q");
    EXPECT_EQ(s.wait_exit(), 0);
  }
}

TEST(TopTmux, KillKeyConfirmsThenStopsTheRealProcess) {
  Fixture f("topkill", 2);
  TmuxSession t("kill", 100, 30, f.command(""));
  ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
  t.keys("k");  // cursor starts on the largest GPU memory: `big`
  ASSERT_TRUE(t.wait_for("Kill (TERM")) << t.capture();
  EXPECT_NE(t.capture().find(std::to_string(f.big) + " sleep"), std::string::npos) << t.capture();
  t.keys("n");
  ASSERT_TRUE(t.wait_for("cancelled")) << t.capture();
  EXPECT_FALSE(reaped_within(f.big, 200));
  t.keys("k");
  ASSERT_TRUE(t.wait_for("Kill (TERM")) << t.capture();
  t.keys("y");
  EXPECT_TRUE(reaped_within(f.big, 4000));
  EXPECT_TRUE(t.wait_for("exited")) << t.capture();
  EXPECT_FALSE(reaped_within(f.small, 100));
  kill(f.top_pid(), SIGTERM);
  EXPECT_EQ(t.wait_exit(), 128 + SIGTERM);
  EXPECT_TRUE(t.terminal_restored());
}

// A process on two GPUs has a row on each; selected, the confirmation names it once (it listed it twice).
TEST(TopTmux, AProcessOnTwoGpusIsNamedOnceInTheConfirmation) {
  Fixture f("toptwo", 2);
  std::ofstream(f.scenario, std::ios::app) << "proc gpu=1 pid=" << f.big << " used_mib=100\n";
  TmuxSession t("two", 160, 30, f.command("-d 30"));
  ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
  t.keys("Space");  // the cursor starts on `big`: both of its rows are selected
  t.keys("k");
  ASSERT_TRUE(t.wait_for("Kill (TERM")) << t.capture();
  const std::string screen = t.capture();
  std::string prompt = screen.substr(screen.find("Kill (TERM"));
  prompt = prompt.substr(0, prompt.find('\n'));
  const std::string name = std::to_string(f.big) + " sleep";
  EXPECT_NE(prompt.find(name), std::string::npos) << prompt;
  EXPECT_EQ(prompt.find(name, prompt.find(name) + 1), std::string::npos) << prompt;
  t.keys("n");
  ASSERT_TRUE(t.wait_for("cancelled")) << t.capture();
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
}

#ifdef CONTROL_TARGET
// A limit is typed, then confirmed with y (N cancels), as every action; it reaches the real process.
TEST(TopTmux, LimitKeyAsksTheValueThenConfirms) {
  gpumem::control::test_support::ControlDir dir;
  gpumem::control::test_support::Target target({});
  // The target uses the most GPU memory, so the cursor starts on it.
  Fixture f("toplimit", 1, "proc gpu=0 pid=" + std::to_string(target.pid()) + " used_mib=30000\n");
  TmuxSession t("limit", 120, 30, f.command("", "GPUMEM_CONTROL_DIR=" + dir.path));
  ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
  const auto limit = [&] {
    const std::string out = shell(gpumem_binary() + " stats " + std::to_string(target.pid()) + " --json");
    return nlohmann::json::parse(out)[0]["devices"][0].value("limit_bytes", std::int64_t(-1));
  };
  ASSERT_TRUE(t.wait_for("ALLOC")) << t.capture();
  for (const char* answer : {"n", "y"}) {
    t.keys("l");
    ASSERT_TRUE(t.wait_for("limit for 1 process")) << t.capture();
    t.keys("2GiB Enter");
    ASSERT_TRUE(t.wait_for("Set the limit of " + std::to_string(target.pid()) + " (GPU 0) to 2GiB? [y/N]")) << t.capture();
    EXPECT_EQ(limit(), 0) << "not before the answer";
    t.keys(answer);
    ASSERT_TRUE(t.wait_for(*answer == 'n' ? "cancelled" : "limit 2.0G")) << t.capture();
  }
  EXPECT_EQ(limit(), std::int64_t(2) << 30);
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
}
#endif

TEST(TopTmux, ReadonlyRefusesActions) {
  Fixture f("topro", 1);
  TmuxSession t("ro", 80, 24, f.command("--readonly"));
  ASSERT_TRUE(t.wait_for("read-only")) << t.capture();
  t.keys("k");
  ASSERT_TRUE(t.wait_for("actions are off")) << t.capture();
  EXPECT_FALSE(reaped_within(f.big, 300));
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
}

// top over one healthy GPU and one whose NVML calls block while the flag file exists (named `name`).
struct StuckGpuTop {
  std::string flag;
  Fixture f;
  TmuxSession t;
  explicit StuckGpuTop(const std::string& name)
      : flag(unlinked(write_scenario(name + "flag", ""))),
        f("top" + name, 1, "gpu name=\"Stuck GPU\" hang_file=" + flag + "\n"),
        t(name, 100, 30, f.command("-d 0.2")) {}
  ~StuckGpuTop() { unlink(flag.c_str()); }
  // Makes the GPU stop answering; true once top shows it.
  bool stick() {
    if (!t.wait_for("Stuck GPU")) return false;
    std::ofstream(flag) << "hang";
    return t.wait_for("NVML NOT ANSWERING", 4000);
  }
  static std::string unlinked(const std::string& path) {
    unlink(path.c_str());
    return path;
  }
};

TEST(TopTmux, GpuThatStopsAnsweringKeepsTheScreenLive) {
  StuckGpuTop top("hang");
  TmuxSession& t = top.t;
  const std::string& hang = top.flag;
  ASSERT_TRUE(top.stick()) << t.capture();
  t.keys("h");  // keys still work while the sampler waits on the driver
  EXPECT_TRUE(t.wait_for("gpumem top keys", 2000)) << t.capture();
  t.keys("x");
  unlink(hang.c_str());
  EXPECT_TRUE(t.wait_for("q quit")) << t.capture();
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0) << t.capture();  // the pane shows what a non-zero status said
  EXPECT_TRUE(t.terminal_restored());
}

// A crash, Ctrl-\ (SIGQUIT) and a hang-up end top with 128+N and give the terminal back.
TEST(TopTmux, CrashQuitAndHangUpSignalsRestoreTheTerminal) {
  for (int sig : {SIGSEGV, SIGQUIT, SIGHUP}) {
    SCOPED_TRACE(strsignal(sig));
    const std::string name = "crash" + std::to_string(sig);
    Fixture f("top" + name, 1);
    TmuxSession t(name, 80, 24, f.command(""));
    ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
    kill(f.top_pid(), sig);
    EXPECT_EQ(t.wait_exit(), 128 + sig);
    EXPECT_TRUE(t.terminal_restored());
    // The shell's line modes too (saved before curses changed them): the pane lists any still off.
    EXPECT_EQ(t.settled("EXIT=").find("-icanon"), std::string::npos) << t.capture();
    EXPECT_EQ(t.capture().find("-echo"), std::string::npos) << t.capture();
  }
}

// A second Ctrl-C ends top at once (a sample stuck in NVML would keep it otherwise): the terminal too is
// given back, not only on the first one's clean way out.
TEST(TopTmux, ASecondCtrlCEndsItAndRestoresTheTerminal) {
  StuckGpuTop top("ctrlc");
  TmuxSession& t = top.t;
  ASSERT_TRUE(top.stick()) << t.capture();
  kill(top.f.top_pid(), SIGINT);  // top now waits up to a second for its stuck sampler
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(top.f.top_pid(), SIGINT);  // ... unless a second one comes
  EXPECT_EQ(t.wait_exit(), 130) << t.capture();
  EXPECT_TRUE(t.terminal_restored());
  EXPECT_EQ(t.settled("EXIT=").find("-icanon"), std::string::npos) << t.capture();
}

// A driver reporting 2^63 bytes for a process made the memory column recurse until the stack ran out.
TEST(TopTmux, AbsurdMemoryReadingsShowWithoutACrash) {
  Fixture f("tophuge", 1, "proc gpu=0 pid=" + std::to_string(getpid()) + " used_mib=8796093022208\n");
  TmuxSession t("huge", 120, 30, f.command(""));
  ASSERT_TRUE(t.wait_for("q quit")) << t.capture();
  EXPECT_NE(t.capture().find("8.0E"), std::string::npos) << t.capture();
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0) << t.capture();
}

// A narrow screen drops whole readings from the GPU line (clocks first), never cuts one mid-word.
TEST(TopTmux, NarrowScreensDropWholeReadingsFromTheGpuLine) {
  Fixture f("topnarrow", 1);
  TmuxSession t("narrow", 66, 24, f.command(""));
  ASSERT_TRUE(t.wait_for("SM 97%")) << t.capture();
  const std::string screen = t.capture();
  std::string line = screen.substr(screen.find("0 NVIDIA"));
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && line.back() == ' ') line.pop_back();
  EXPECT_EQ(line.find("clk"), std::string::npos) << line;
  EXPECT_EQ(line.substr(line.size() - 13), "412W/700W  P0") << line;  // the clocks went whole
  t.keys("q");
  EXPECT_EQ(t.wait_exit(), 0);
}

TEST(TopTmux, WithoutTerminalOneSentenceAndExit2) {
  Fixture f("topnotty", 1);
  auto r = run_gpumem({"top"}, {{"GPUMEM_NVML_LIBRARY", fake_nvml_path()}, {"GPUMEM_FAKE_NVML_SCENARIO", f.scenario}});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("needs a terminal"), std::string::npos) << r.err;
}
