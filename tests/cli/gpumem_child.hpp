// The built gpumem binary as a child process for the CLI tests: a scratch directory per test, and one
// run with stdout and stderr captured (optionally under a cap on its address space, as `ulimit -v`).
#pragma once
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gpumem::testing {

struct Outcome {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
};

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fixture with its own scratch directory, removed after the test.
class ScratchDirTest : public ::testing::Test {
 protected:
  explicit ScratchDirTest(std::string prefix) : prefix_(std::move(prefix)) {}
  void SetUp() override {
    // A parameterized test's name holds '/': one directory level, so that TearDown leaves nothing behind.
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '_');
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + std::to_string(::getpid()) + "_" + name);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // gpumem ARGS; `address_space_cap` > 0 caps the child's RLIMIT_AS at that many bytes; `stdin_fd` >= 0
  // becomes the child's standard input (and is closed here once the child has it).
  Outcome run_gpumem(const std::vector<std::string>& args, std::uint64_t address_space_cap = 0, int stdin_fd = -1) const {
    const std::string binary = GPUMEM_BINARY_DIR "/gpumem";
    const std::filesystem::path out = dir_ / "stdout", err = dir_ / "stderr";
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(o, 1);
      ::dup2(e, 2);
      if (stdin_fd >= 0) ::dup2(stdin_fd, 0);
      std::vector<char*> argv{const_cast<char*>(binary.c_str())};
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      const rlimit cap{rlim_t(address_space_cap), rlim_t(address_space_cap)};
      if (address_space_cap && ::setrlimit(RLIMIT_AS, &cap) != 0) ::_exit(126);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    if (stdin_fd >= 0) ::close(stdin_fd);
    int wstatus = 0;
    ::waitpid(pid, &wstatus, 0);
    Outcome r;
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }

  std::filesystem::path dir_;

 private:
  std::string prefix_;
};

}  // namespace gpumem::testing
