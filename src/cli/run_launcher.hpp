// Launching the program of `gpumem run`. Contract:
// - ScratchDir: a private temporary directory that does not outlive gpumem. The destructor removes it;
//   a reaper process forked at creation removes it when gpumem dies any other way (SIGKILL included):
//   it waits for EOF on a pipe only gpumem holds open.
// - launch(): fork + exec (PATH search) with every signal at its default disposition and an empty mask,
//   whatever gpumem inherited or installed; the child is killed when gpumem dies (PR_SET_PDEATHSIG,
//   checked again after it is set against a parent that already died). Throws LaunchError with errno's
//   sentence when exec fails.
// - wait_for_child(): waits, relaying SIGINT, SIGTERM, SIGHUP and SIGQUIT that another process sent to
//   gpumem alone. Signals the terminal sends to the whole foreground group (Ctrl-C, Ctrl-\) already
//   reach the child, so they are not relayed: the program sees Ctrl-C once. Returns the wait status.
// - exit_code_of(): the child's exit code, or 128 + signal (130 for SIGINT), as a shell reports it.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gpumem/errors.hpp"

namespace gpumem::cli {

class LaunchError : public Error {
 public:
  using Error::Error;
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

}  // namespace gpumem::cli
