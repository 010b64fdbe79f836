// The fixture of the `gpumem run` tests (run_cli_test.cpp: options, environment, exit statuses;
// run_signals_test.cpp: signals, terminals, what a killed run leaves): the built binary runs as a child
// process in a directory of the test's own.
#pragma once
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

namespace gpumem::testing::run_cli {

namespace fs = std::filesystem;
using gpumem::testing::exec_gpumem;
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
  // What the program, started in the test's directory with `name`=`value` set (often relative), sees once
  // it has left that directory: `gpumem run -q -- sh -c "cd / && echo WHAT"`.
  std::string seen_after_cd(const std::string& what, const char* name, const char* value) const {
    const fs::path seen = dir_ / "seen";
    const pid_t pid = start({"run", "-q", "--", "sh", "-c", "cd / && echo \"" + what + "\" > " + seen.string()},
                            [this, name, value] {
                              if (chdir(dir_.c_str()) != 0) _exit(126);
                              setenv(name, value, 1);
                            });
    return wait_exit(pid) == 0 ? slurp(seen.string()) : "(gpumem run failed)";
  }

  fs::path dir_;
};

// The program a bad command line must never start: it leaves a marker file.
inline std::vector<std::string> with_marker_program(std::vector<std::string> run_words, const std::string& marker) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), run_words.begin(), run_words.end());
  for (const char* w : {"--", "sh", "-c"}) args.push_back(w);
  args.push_back("touch " + marker);
  return args;
}

}  // namespace gpumem::testing::run_cli
