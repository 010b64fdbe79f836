// Sampling loops for query and dmon. Contract: Ticker paces samples on an absolute schedule (no drift)
// and returns false from wait() once SIGINT or SIGTERM has arrived, so loops end cleanly, flushing what
// they printed. install_stop_handlers() must be called before the first wait(). A program whose loop
// cannot get back to wait() (an NVML call blocked on a hung GPU) still ends: 3 s after the signal, or at
// once on a second one (exit 130 for SIGINT, 128 + the signal otherwise).
#pragma once
#include <chrono>

namespace gpumem::monitor {

void install_stop_handlers();
// An async-signal-safe function to run before a forced exit (top: give the terminal back).
void before_forced_exit(void (*restore)() noexcept) noexcept;
// The program saw the stop and is ending by itself: no forced exit any more, and a further signal acts
// as it would without these handlers. Ticker::wait() calls it when it returns false.
void stop_handled() noexcept;
bool stop_requested() noexcept;
int stop_signal() noexcept;  // the signal that stopped us, 0 if none
// The exit code for a loop that a signal stopped: 130 for SIGINT (Ctrl-C), 128 + N for signal N (143 for
// SIGTERM), as a shell reports a program killed by it; 0 if none did.
int stop_exit_code() noexcept;

class Ticker {
 public:
  explicit Ticker(std::chrono::nanoseconds period);
  bool wait();  // sleeps until the next tick; false when a stop was requested

 private:
  std::chrono::nanoseconds period_;
  std::chrono::steady_clock::time_point next_;
};

}  // namespace gpumem::monitor
