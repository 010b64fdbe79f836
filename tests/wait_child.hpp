// Waiting for a forked test child with a deadline: a child that hangs (a lock its parent's thread held
// at the fork, a sanitizer's runtime) is killed and reported as a failure, never a test that waits forever.
#pragma once
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace gpumem::testing {

inline constexpr std::chrono::seconds kChildDeadline{60};

// Waits for `pid` up to `limit`; kills and reaps it past that. True when it exited in time (`status` set).
inline bool wait_child(pid_t pid, int* status, std::chrono::milliseconds limit = kChildDeadline) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// Reads `fd` to its end, or until `deadline`; false if the deadline came first.
inline bool read_until_closed(int fd, std::string& out, std::chrono::steady_clock::time_point deadline) {
  char buf[512];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, int(left.count()));
    if (ready < 0) return false;
    if (ready == 0) continue;
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return n == 0;
    out.append(buf, std::size_t(n));
  }
}

}  // namespace gpumem::testing
