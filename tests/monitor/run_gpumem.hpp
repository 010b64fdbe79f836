// Runs the built gpumem binary as a child process with extra environment, capturing stdout, stderr
// and the exit status; plus golden-file comparison with timestamps masked.
#pragma once
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gpumem::testing {

struct RunResult {
  std::string out, err;
  int status = -1;  // exit code, or 128+signal
  bool signaled = false;  // killed by a signal (status 128+signal) rather than exiting
};

inline std::string gpumem_binary() { return std::string(GPUMEM_BINARY_DIR) + "/gpumem"; }

// In a forked child: becomes gpumem ARGS (exit 127 if it cannot).
[[noreturn]] inline void exec_gpumem(const std::vector<std::string>& args) {
  std::vector<std::string> full = {gpumem_binary()};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  _exit(127);
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Decides, from the stdout written so far, that a loop mode has shown enough and may be interrupted.
using OutputReady = std::function<bool(const std::string& out)>;

// Starts gpumem with `args`; `env` entries are set (an empty value unsets). `interrupt_after_ms` > 0
// sends SIGINT after that long (for the loop modes); with `ready`, SIGINT goes as soon as `ready`
// accepts the output so far and `interrupt_after_ms` is only the ceiling (a slow sanitizer start
// must not fail a test that waits on wall time). `stop_signal`: the signal sent instead of SIGINT.
inline RunResult run_gpumem(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
                            int interrupt_after_ms = 0, const OutputReady& ready = {}, int stop_signal = SIGINT) {
  char out_tmpl[] = "/tmp/gpumem-out-XXXXXX", err_tmpl[] = "/tmp/gpumem-err-XXXXXX";
  int out_fd = mkstemp(out_tmpl), err_fd = mkstemp(err_tmpl);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    for (const auto& [k, v] : env) {
      if (v.empty()) unsetenv(k.c_str());
      else setenv(k.c_str(), v.c_str(), 1);
    }
    exec_gpumem(args);
  }
  if (interrupt_after_ms > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(interrupt_after_ms);
    while (ready && std::chrono::steady_clock::now() < deadline && !ready(slurp(out_tmpl)))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(interrupt_after_ms));
    kill(pid, stop_signal);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  RunResult r;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.signaled = WIFSIGNALED(st);
  close(out_fd);
  close(err_fd);
  r.out = slurp(out_tmpl);
  r.err = slurp(err_tmpl);
  unlink(out_tmpl);
  unlink(err_tmpl);
  return r;
}

inline std::string mask_timestamps(const std::string& s) {
  static const std::regex ts(R"(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3})");
  return std::regex_replace(s, ts, "<TIMESTAMP>");
}

inline std::string mask_build_dir(std::string s) {
  const std::string dir = GPUMEM_BINARY_DIR;
  for (size_t at = s.find(dir); at != std::string::npos; at = s.find(dir, at)) s.replace(at, dir.size(), "<BUILD>");
  return s;
}

// Compares with tests/monitor/golden/<name>; GPUMEM_UPDATE_GOLDEN=1 rewrites the file instead.
inline void expect_golden(const std::string& name, const std::string& actual) {
  std::string path = std::string(GPUMEM_SOURCE_DIR) + "/tests/monitor/golden/" + name;
  if (const char* u = std::getenv("GPUMEM_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream f(path, std::ios::binary);
  ASSERT_TRUE(f.good()) << "missing golden file " << path << " (run with GPUMEM_UPDATE_GOLDEN=1)";
  EXPECT_EQ(slurp(path), actual) << "golden file " << path;
}

}  // namespace gpumem::testing
