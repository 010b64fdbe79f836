// `gpumem run` and signals: what the program starts with, what reaches it from a terminal or from kill,
// how gpumem ends after it, and what a killed gpumem leaves behind.
#include "cli/run_cli_fixture.hpp"

namespace {
using namespace gpumem::testing::run_cli;

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
