// Drives a program inside a private tmux server: start at a size, send keys, capture the screen,
// read the pane's state after the program ended (exit status, alternate screen, cursor).
#pragma once
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <thread>

namespace gpumem::testing {

inline std::string shell(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

class TmuxSession {
 public:
  // `command` runs under sh.
  TmuxSession(const std::string& name, int width, int height, const std::string& command)
      : socket_("gpumem-test-" + std::to_string(getpid()) + "-" + name) {
    shell(tmux() + " -f /dev/null new-session -d -x " + std::to_string(width) + " -y " + std::to_string(height) +
          " 'sleep 0.3; " + command + "' 2>&1");
  }
  ~TmuxSession() { shell(tmux() + " kill-server 2>/dev/null"); }

  std::string capture() const { return shell(tmux() + " capture-pane -p"); }
  void keys(const std::string& keys) const { shell(tmux() + " send-keys " + keys); }
  std::string format(const std::string& f) const { return trimmed(shell(tmux() + " display-message -p '" + f + "'")); }

  // Waits until the screen contains `text` (true) or the timeout passes (false).
  bool wait_for(const std::string& text, int timeout_ms = 5000) const {
    for (int waited = 0; waited < timeout_ms; waited += 50) {
      if (capture().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The screen once `text` is on it and two captures 250 ms apart agree: a slow machine may still be
  // drawing when `text` first shows.
  std::string settled(const std::string& text, int timeout_ms = 5000) const {
    wait_for(text, timeout_ms);
    std::string last = capture();
    for (int waited = 0; waited < timeout_ms; waited += 250) {
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
      std::string now = capture();
      if (now == last && now.find(text) != std::string::npos) return now;
      last = now;
    }
    return last;
  }
  // The program's exit status, once the command line printed "EXIT=<status>"; -1 on timeout.
  int wait_exit(int timeout_ms = 5000) const {
    if (!wait_for("EXIT=", timeout_ms)) return -1;
    std::string screen = capture();
    return std::atoi(screen.c_str() + screen.find("EXIT=") + 5);
  }
  // What a user finds after the program: main screen back, cursor visible, arrow keys sending what the
  // shell expects (keypad mode off).
  bool terminal_restored() const { return format("#{alternate_on} #{cursor_flag} #{keypad_flag}") == "0 1 0"; }

 private:
  std::string tmux() const { return "tmux -L " + socket_; }
  static std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }
  std::string socket_;
};

}  // namespace gpumem::testing
