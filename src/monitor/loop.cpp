#include "monitor/loop.hpp"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <ctime>

#include <unistd.h>

namespace gpumem::monitor {
namespace {
std::atomic<int> g_stop_signal{0};
constexpr unsigned kStopGraceSeconds = 3;
void (*g_before_forced_exit)() noexcept = nullptr;
int exit_code_for(int sig) { return sig == SIGINT ? 130 : 128 + sig; }
// A loop that never gets back to its check (an NVML call blocked on a hung GPU) still ends: after a
// grace period, or at once on a second signal. Both only call async-signal-safe functions.
[[noreturn]] void forced_exit(int sig) {
  if (g_before_forced_exit) g_before_forced_exit();
  _exit(exit_code_for(sig));
}
extern "C" void on_grace_over(int) { forced_exit(g_stop_signal.load()); }
extern "C" void on_stop(int sig) {
  if (g_stop_signal.exchange(sig) != 0) forced_exit(sig);
  alarm(kStopGraceSeconds);
}
}  // namespace

void before_forced_exit(void (*restore)() noexcept) noexcept { g_before_forced_exit = restore; }

int stop_exit_code() noexcept {
  const int sig = g_stop_signal.load();
  return sig ? exit_code_for(sig) : 0;
}

void stop_handled() noexcept {
  alarm(0);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
}

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: the sleep returns EINTR at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sa.sa_handler = on_grace_over;
  sigaction(SIGALRM, &sa, nullptr);
}

bool stop_requested() noexcept { return g_stop_signal.load() != 0; }
int stop_signal() noexcept { return g_stop_signal.load(); }

Ticker::Ticker(std::chrono::nanoseconds period) : period_(period), next_(std::chrono::steady_clock::now()) {}

bool Ticker::wait() {
  next_ += period_;
  auto now = std::chrono::steady_clock::now();
  if (next_ < now) next_ = now;  // fell behind (slow NVML call): restart the schedule, never burst
  auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(next_.time_since_epoch()).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  while (!stop_requested()) {
    int rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    if (rc == 0) break;
    if (rc != EINTR) break;
  }
  if (stop_requested()) stop_handled();  // the loop ends now, by itself
  return !stop_requested();
}

}  // namespace gpumem::monitor
