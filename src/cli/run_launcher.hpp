// Launching the program of `gpumem run`. Contract:
// - ScratchDir: a private temporary directory that does not outlive gpumem. The destructor removes it;
//   a reaper process forked at creation removes it when gpumem dies any other way (SIGKILL included):
//   it waits for EOF on a pipe only gpumem holds open.
// - launch(): fork + exec (PATH search) with every signal at its default disposition and an empty mask,
//   whatever gpumem inherited or installed, except that SIGINT, SIGTERM, SIGHUP and SIGQUIT ignored when
//   gpumem started stay ignored, in gpumem (it relays none of them) and in the program: nohup ignores
//   SIGHUP, a non-interactive shell ignores SIGINT and SIGQUIT in its background jobs; the child is killed when gpumem dies (PR_SET_PDEATHSIG,
//   checked again after it is set against a parent that already died). Throws LaunchError when exec
//   fails: not found (in PATH, or a script's #! interpreter; exit code 127) or not runnable (126).
// - wait_for_child(): waits, relaying SIGINT, SIGTERM, SIGHUP and SIGQUIT that another process sent to
//   gpumem alone. Signals the terminal sends to the whole foreground group (Ctrl-C, Ctrl-\) already
//   reach a child in gpumem's process group, so they are relayed only to a child that left it (timeout,
//   setsid -w): the program sees Ctrl-C once either way. Returns the wait status.
// - exit_code_of(): the child's exit code, or 128 + signal (130 for SIGINT), as a shell reports it.
// - die_of_signal(): ends gpumem with the signal that ended the program (default disposition, unblocked),
//   so that its parent sees what it would have seen without gpumem: a shell loop stops on Ctrl-C. For a
//   signal that dumps core (SIGQUIT, SIGSEGV, SIGABRT...) gpumem makes itself undumpable first: no core
//   of gpumem's. Flushes stdio; call it once the scratch directory and the report are done.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gpumem/errors.hpp"

namespace gpumem::cli {

// exit_code: 127 when the program (or its #! interpreter) is not found, 126 when it cannot be run, as a
// shell says; 1 when gpumem itself could not fork or make a pipe.
class LaunchError : public Error {
 public:
  LaunchError(const std::string& what, int exit_code = 126) : Error(what), exit_code_(exit_code) {}
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix);  // throws Error
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  int reaper_pipe_ = -1;  // write end; closing it (or dying) tells the reaper to clean up
  pid_t reaper_ = -1;
};

pid_t launch(const std::vector<std::string>& command);
int wait_for_child(pid_t child);
int exit_code_of(int wait_status);
[[noreturn]] void die_of_signal(int sig);

}  // namespace gpumem::cli
