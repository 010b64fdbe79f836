// Test helpers for control tests with real processes: a private socket directory, a running
// tests/control/control_target.cpp driven line by line over pipes, and the gpumem binary run by a shell.
// The including test defines CONTROL_TARGET (the program's path) in its CMake, as tests/control does.
#pragma once
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpumem::control::test_support {

inline constexpr std::int64_t MiB = 1 << 20;

// A private socket directory for this test, so parallel tests and real processes do not mix.
struct ControlDir {
  std::string path;
  ControlDir() {
    char tmpl[] = "/tmp/gpumem-ctltest-XXXXXX";
    path = mkdtemp(tmpl);
    setenv("GPUMEM_CONTROL_DIR", path.c_str(), 1);
  }
  ~ControlDir() { std::system(("rm -rf " + path).c_str()); }
};

// A control_target child on the host backend; `env` adds NAME=VALUE settings.
class Target {
 public:
  explicit Target(const std::vector<std::string>& env) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[1]);
      close(out[0]);
      setenv("GPUMEM_BACKEND", "host", 1);
      for (const auto& kv : env) putenv(strdup(kv.c_str()));
      execl(CONTROL_TARGET, CONTROL_TARGET, nullptr);
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = fdopen(in[1], "w");
    from_ = fdopen(out[0], "r");
    std::string ready = line();
    if (ready.rfind("ready ", 0) != 0) throw std::runtime_error("target said: " + ready);
  }
  ~Target() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (to_) fclose(to_);
    if (from_) fclose(from_);
  }
  int pid() const { return pid_; }
  std::string ask(const std::string& command) {
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    return line();
  }
  nlohmann::json self_stats() { return nlohmann::json::parse(ask("stats")); }
  int wait_exit() {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  std::string line() {
    char buf[512];
    if (!std::fgets(buf, sizeof buf, from_)) return "<eof>";
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

// Runs a shell command; returns exit status and stdout.
inline std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

inline const std::string kGpumem = std::string(GPUMEM_BINARY_DIR) + "/gpumem";

}  // namespace gpumem::control::test_support
