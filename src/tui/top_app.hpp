// `gpumem top`: the terminal session. Contract: run_top() takes over the terminal only when stdin and
// stdout are terminals, and gives it back (cursor, echo, main screen) on every way out: q, SIGINT,
// SIGTERM, an exception, and a crash signal (SIGSEGV/SIGABRT/SIGBUS/SIGFPE restore, then re-raise).
// Actions (c, l, s, k) run off the screen thread after a y/N confirmation and are refused with
// --readonly. Throws monitor::UsageError for a bad option (before the terminal changes).
#pragma once
#include <chrono>
#include <string>

namespace gpumem::tui {

struct TopOptions {
  std::string ids;  // -i, as nvidia-smi
  std::chrono::milliseconds period{1000};
  bool readonly = false;
  bool use_control = true;
};

// Exit status: 0 after q, 130 after SIGINT, 128 + N after another stop signal N (143: SIGTERM).
int run_top(const TopOptions& options);

}  // namespace gpumem::tui
