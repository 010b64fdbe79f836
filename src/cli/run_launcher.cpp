#include "cli/run_launcher.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpumem::cli {
namespace {

namespace fs = std::filesystem;

constexpr int kRelayed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

volatile sig_atomic_t g_child = 0;

// The relayed signals that were ignored when gpumem started: nohup ignores SIGHUP, a non-interactive
// shell ignores SIGINT and SIGQUIT in its background jobs. They stay ignored, for gpumem and the program.
sigset_t g_kept_ignored;

extern "C" void relay_signal(int sig, siginfo_t* info, void*) {
  const pid_t child = g_child;
  if (child <= 0) return;
  const int saved_errno = errno;
  // SI_KERNEL: the terminal (Ctrl-C, Ctrl-\, hangup) sent it to its foreground process group, gpumem's.
  // The program got it too while it is in that group; one in a group or session of its own (timeout,
  // setsid -w) did not, and gets it from here, once either way.
  const bool reached_child = info->si_code == SI_KERNEL && getpgid(child) == getpgrp();
  if (!reached_child && !(info->si_code == SI_USER && info->si_pid == child)) kill(child, sig);
  errno = saved_errno;
}

std::string errno_sentence(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// The file execvp ran for `name`: itself when it names a path, else the first executable file of that
// name in PATH; "" when there is none.
std::string resolve_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/bin:/usr/bin";
  for (std::size_t start = 0;;) {
    const std::size_t end = dirs.find(':', start);
    std::string dir = dirs.substr(start, end - start);
    const std::string candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    if (end == std::string::npos) return "";
    start = end + 1;
  }
}

// Why exec of `name` failed with `err`, in one sentence, and the shell's exit code for it.
LaunchError exec_error(const std::string& name, int err) {
  const std::string head = "cannot run '" + name + "': ";
  if (name.empty()) return LaunchError("cannot run '': the program's name is empty", 127);
  std::error_code dir_ec;
  if (err == EACCES && fs::is_directory(resolve_program(name), dir_ec)) return LaunchError(head + "it is a directory", 126);
  if (err != ENOENT) return LaunchError(head + std::strerror(err), 126);
  const std::string file = resolve_program(name);
  std::error_code ec;
  if (file.empty() || !fs::exists(file, ec))
    return LaunchError(head + (name.find('/') != std::string::npos ? "no such file" : "no such program in PATH"), 127);
  // The file is there: what is missing is what the kernel runs it with.
  char line[256] = {};
  if (FILE* f = std::fopen(file.c_str(), "r")) {
    if (!std::fgets(line, sizeof line, f)) line[0] = 0;
    std::fclose(f);
  }
  if (line[0] == '#' && line[1] == '!') {
    std::string interpreter = line + 2;
    interpreter.erase(0, interpreter.find_first_not_of(" \t"));
    interpreter.erase(std::min(interpreter.find_first_of(" \t\r\n"), interpreter.size()));
    const std::string rest = line + 2;
    if (rest.find("\r\n") != std::string::npos && rest.find_first_of(" \t") > rest.find('\r'))
      return LaunchError(head + "its #! line ends in a carriage return (Windows line endings), so the kernel looks "
                         "for an interpreter named '" + interpreter + "\\r'; convert the file (dos2unix)", 127);
    return LaunchError(head + "its interpreter " + interpreter + " (on its #! line) does not exist", 127);
  }
  return LaunchError(head + "the file exists but the loader it names (its ELF interpreter) does not", 127);
}

// In the forked child, before exec: the state a program expects to start in, but for the relayed signals
// gpumem was started with ignored (g_kept_ignored), which the program inherits ignored as well.
void reset_child_signals() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP || sigismember(&g_kept_ignored, sig) == 1) continue;
    sigaction(sig, &dfl, nullptr);  // fails harmlessly for glibc's own
  }
  // glibc refuses to touch its reserved signals (32, 33), yet a parent may have ignored them through the
  // kernel directly (sanitizer runtimes do): reset those with the system call itself.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } kernel_dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 32; sig < SIGRTMIN; ++sig) syscall(SYS_rt_sigaction, sig, &kernel_dfl, nullptr, sizeof kernel_dfl.mask);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace

ScratchDir::ScratchDir(const std::string& prefix) {
  // Absolute even where TMPDIR is relative: the program's PYTHONPATH and GPUMEM_REPORT_DIR name the
  // directory, and the program may change its own.
  std::error_code ec;
  const fs::path base = fs::temp_directory_path(ec);
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string where = tmpdir && *tmpdir ? std::string("TMPDIR=") + tmpdir : base.string();
  if (ec) throw Error(where + " is not a directory (gpumem run makes its temporary directory there)");
  std::string tmpl = (fs::absolute(base, ec) / (prefix + "XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw Error(errno_sentence(("cannot create a temporary directory in " + where).c_str()));
  path_ = tmpl;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const std::string why = errno_sentence("pipe");
    std::error_code ec;
    fs::remove_all(path_, ec);
    throw Error(why);
  }
  reaper_ = fork();
  if (reaper_ == 0) {
    // The reaper: out of the terminal's session (Ctrl-C and hangup do not reach it), holding no file of
    // gpumem's but the pipe's read end, which reads EOF once gpumem is gone however it went.
    setsid();
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    dup2(fds[0], 0);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(null, 2);
    close_range(3, ~0U, 0);
    char byte;
    while (read(0, &byte, 1) != 0 && errno == EINTR) {
    }
    std::error_code ec;
    fs::remove_all(path_, ec);
    _exit(0);
  }
  close(fds[0]);
  reaper_pipe_ = fds[1];
  if (reaper_ < 0) {
    const std::string why = errno_sentence("fork");
    close(reaper_pipe_);
    std::error_code ec;
    fs::remove_all(path_, ec);
    throw Error(why);
  }
}

ScratchDir::~ScratchDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  close(reaper_pipe_);
  while (waitpid(reaper_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

pid_t launch(const std::vector<std::string>& command) {
  // Relayed signals stay blocked until g_child names the child, so none is lost in between; the child
  // unblocks them after resetting the handlers it inherited.
  sigset_t relayed, old_mask;
  sigemptyset(&relayed);
  for (int sig : kRelayed) sigaddset(&relayed, sig);
  sigprocmask(SIG_BLOCK, &relayed, &old_mask);
  struct sigaction relay {};
  relay.sa_sigaction = relay_signal;
  relay.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&relay.sa_mask);
  sigemptyset(&g_kept_ignored);
  for (int sig : kRelayed) {
    struct sigaction inherited {};
    sigaction(sig, nullptr, &inherited);
    if (!(inherited.sa_flags & SA_SIGINFO) && inherited.sa_handler == SIG_IGN) {
      sigaddset(&g_kept_ignored, sig);  // nohup's SIGHUP, a background job's SIGINT: not ours to undo
      continue;
    }
    sigaction(sig, &relay, nullptr);
  }

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(errno_sentence("pipe"), 1);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    throw LaunchError(errno_sentence("fork"), 1);
  }
  if (pid == 0) {
    close(fds[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(128 + SIGKILL);  // gpumem died before the line above took effect
    reset_child_signals();
    std::vector<char*> argv;
    for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] ssize_t ignored = write(fds[1], &err, sizeof err);
    _exit(127);
  }
  close(fds[1]);
  g_child = pid;
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  int err = 0;
  ssize_t n;
  while ((n = read(fds[0], &err, sizeof err)) < 0 && errno == EINTR) {
  }
  close(fds[0]);
  if (n == ssize_t(sizeof err)) {
    g_child = 0;
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw exec_error(command[0], err);
  }
  return pid;
}

int wait_for_child(pid_t child) {
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) {
      status = 0;
      break;
    }
  }
  g_child = 0;
  return status;
}

int exit_code_of(int wait_status) {
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return WEXITSTATUS(wait_status);
}

void die_of_signal(int sig) {
  std::fflush(nullptr);
  // The signals whose default action dumps core: the program's core (if any) is what a user wants, not
  // gpumem's. Not dumpable: no core file, nor a core handed to systemd-coredump or apport.
  switch (sig) {
    case SIGQUIT: case SIGILL: case SIGTRAP: case SIGABRT: case SIGBUS: case SIGFPE: case SIGSEGV:
    case SIGXCPU: case SIGXFSZ: case SIGSYS: {
      const rlimit none{0, 0};
      setrlimit(RLIMIT_CORE, &none);
      prctl(PR_SET_DUMPABLE, 0);
      break;
    }
    default:
      break;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  kill(getpid(), sig);
  _exit(128 + sig);  // not reached for a signal that can end a process (the only ones a child dies of)
}

}  // namespace gpumem::cli
