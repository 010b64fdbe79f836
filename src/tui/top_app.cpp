#include "tui/top_app.hpp"

#include <curses.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <clocale>
#include <csignal>
#include <cstring>
#include <functional>
#include <future>
#include <sstream>
#include <thread>
#include <langinfo.h>

#include <gpumem/limits.hpp>
#include <gpumem/trace.hpp>

#include "control/client.hpp"
#include "monitor/common.hpp"
#include "monitor/kill.hpp"
#include "monitor/loop.hpp"
#include "tui/screen.hpp"

namespace gpumem::tui {
namespace {

// What a crash handler needs to give the terminal back without curses (async-signal-safe calls only).
termios g_saved_termios;
bool g_have_termios = false;
char g_restore_seq[128];
size_t g_restore_len = 0;

void restore_terminal() noexcept {
  if (g_have_termios) tcsetattr(STDIN_FILENO, TCSANOW, &g_saved_termios);
  if (g_restore_len) (void)!write(STDOUT_FILENO, g_restore_seq, g_restore_len);
}

extern "C" void on_crash(int sig) {
  restore_terminal();
  signal(sig, SIG_DFL);
  raise(sig);
}

// The terminal's modes as the shell left them: read before initscr() changes them.
void save_terminal_modes() { g_have_termios = tcgetattr(STDIN_FILENO, &g_saved_termios) == 0; }

// Signals that end top without its own clean exit (Ctrl-C and SIGTERM have one).
constexpr int kRestoreSignals[] = {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGQUIT, SIGHUP};

// The handler runs on a stack of its own: a crash by stack overflow must give the terminal back too.
alignas(16) char g_crash_stack[64 * 1024];

void prepare_crash_restore() {
  for (const char* cap : {"rmcup", "rmkx", "cnorm", "sgr0"}) {
    const char* s = tigetstr(const_cast<char*>(cap));
    if (!s || s == reinterpret_cast<char*>(-1)) continue;
    size_t n = std::strlen(s);
    if (g_restore_len + n >= sizeof g_restore_seq) break;
    std::memcpy(g_restore_seq + g_restore_len, s, n);
    g_restore_len += n;
  }
  stack_t alt{};
  alt.ss_sp = g_crash_stack;
  alt.ss_size = sizeof g_crash_stack;
  sigaltstack(&alt, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_ONSTACK;
  // Ctrl-\ and a hang-up end top as a crash does (128+N), and must give the terminal back as well.
  for (int sig : kRestoreSignals) sigaction(sig, &sa, nullptr);
  monitor::before_forced_exit(restore_terminal);  // a second Ctrl-C, or a sample stuck in NVML
}

struct CursesSession {
  CursesSession() {
    save_terminal_modes();
    initscr();
    prepare_crash_restore();
    cbreak();  // Ctrl-C stays a signal
    noecho();
    keypad(stdscr, TRUE);
    curs_set(0);
    set_escdelay(50);
  }
  ~CursesSession() {
    endwin();
    // endwin() leaves the cursor hidden under tmux (its alternate screen keeps the mode): show it.
    if (const char* cnorm = tigetstr(const_cast<char*>("cnorm")); cnorm && cnorm != reinterpret_cast<char*>(-1)) {
      std::fputs(cnorm, stdout);
      std::fflush(stdout);
    }
    for (int sig : kRestoreSignals) signal(sig, SIG_DFL);
  }
};

enum class Mode { kNormal, kConfirm, kInput };

struct Prompt {
  Mode mode = Mode::kNormal;
  std::string question, input;
  std::function<std::string(const std::string&)> action;  // runs off the screen thread
};

// Runs an action off the screen thread. Not std::async: its future's destructor waits for the action, so
// replacing it (a second action) or quitting froze the screen until a kill or a stopped process gave up.
std::future<std::string> start_action(std::function<std::string()> fn) {
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> done = promise->get_future();
  std::thread([promise, fn = std::move(fn)] {
    try {
      promise->set_value(fn());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  return done;
}

std::string one_line(std::string s) {
  while (!s.empty() && s.back() == '\n') s.pop_back();
  for (char& c : s)
    if (c == '\n') c = ';';
  return s;
}

std::string for_each_pid(const std::vector<int>& pids, const std::function<std::string(int)>& fn) {
  std::string out;
  for (int pid : pids) {
    std::string r;
    try {
      r = fn(pid);
    } catch (const std::exception& e) {
      r = e.what();
    }
    out += (out.empty() ? "" : "; ") + r;
  }
  return out;
}

std::string limit_action(const std::vector<std::pair<int, int>>& targets, const LimitAmount& amount) {
  std::string out;
  for (auto [pid, device] : targets) {
    std::string r;
    try {
      auto a = amount.fraction ? control::limit_fraction(pid, device, amount.share) : control::limit_bytes(pid, device, amount.bytes);
      r = std::to_string(pid) + (a.limit_bytes ? ": limit " + short_bytes(a.limit_bytes) : std::string(": no limit")) +
          (a.fits ? "" : " (reserved is above it)");
    } catch (const std::exception& e) {
      r = e.what();
    }
    out += (out.empty() ? "" : "; ") + r;
  }
  return out;
}

}  // namespace

int run_top(const TopOptions& o) {
  if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO))
    throw monitor::UsageError("top needs a terminal; for pipes and scripts use `gpumem --json` or `gpumem dmon`.");
  monitor::SamplerOptions so;
  so.ids = o.ids;
  so.process_utilization = true;
  auto collector = std::make_unique<TopCollector>(monitor::Sampler(so), o.period, o.use_control);
  std::setlocale(LC_ALL, "");
  ScreenStyle style;
  style.unicode = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
  monitor::install_stop_handlers();
  std::set_terminate([] {
    endwin();
    std::abort();
  });
  CursesSession session;
  const char* no_color = std::getenv("NO_COLOR");
  style.color = has_colors() && !(no_color && *no_color);
  init_style(style);
  timeout(200);

  ViewState view;
  Overlay overlay;
  Prompt prompt;
  std::future<std::string> running;
  unsigned long long drawn = 0;
  bool dirty = true;
  long long last_stall_s = -1;
  std::shared_ptr<const TopData> data = collector->latest();

  auto targets = [&]() {
    std::vector<const ProcRow*> out;
    auto rows = visible_rows(*data, view);
    for (const ProcRow* r : rows)
      if (view.selected.count(r->pid)) out.push_back(r);
    if (out.empty() && view.cursor < static_cast<int>(rows.size())) out.push_back(rows[view.cursor]);
    return out;
  };
  // A process has a row per GPU it uses; actions and their confirmation go by process.
  auto one_per_pid = [](const std::vector<const ProcRow*>& rows) {
    std::vector<const ProcRow*> out;
    for (const ProcRow* r : rows)
      if (std::none_of(out.begin(), out.end(), [r](const ProcRow* o) { return o->pid == r->pid; })) out.push_back(r);
    return out;
  };
  auto confirm = [&](const char* verb, std::function<std::string(const std::vector<const ProcRow*>&)> act) {
    if (o.readonly) {
      overlay.message = "read-only: actions are off (started with --readonly)";
      return;
    }
    auto t = targets();
    if (t.empty()) {
      overlay.message = "no process under the cursor";
      return;
    }
    std::string who;
    for (const ProcRow* r : one_per_pid(t)) who += (who.empty() ? "" : ", ") + describe(*r);
    prompt.mode = Mode::kConfirm;
    prompt.input.clear();  // what an earlier prompt left would read as a typed answer
    prompt.question = std::string(verb) + " " + who + "? [y/N]";
    auto copy = std::make_shared<std::vector<ProcRow>>();
    for (const ProcRow* r : t) copy->push_back(*r);
    prompt.action = [act, copy](const std::string&) {
      std::vector<const ProcRow*> ptrs;
      for (const ProcRow& r : *copy) ptrs.push_back(&r);
      return act(ptrs);
    };
  };
  auto pids_of = [one_per_pid](const std::vector<const ProcRow*>& rows) {
    std::vector<int> pids;
    for (const ProcRow* r : one_per_pid(rows)) pids.push_back(r->pid);
    return pids;
  };

  // One action at a time: a second one waits for nothing and says so.
  auto busy = [&] { return running.valid() && running.wait_for(std::chrono::seconds(0)) != std::future_status::ready; };
  static constexpr const char* kBusy = "the previous action is still running; try again when it has answered";

  bool quit = false, quit_asked = false;
  while (!quit && !monitor::stop_requested()) {
    if (running.valid() && running.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      overlay.message = one_line(running.get());
      collector->refresh_now();
      dirty = true;
    }
    data = collector->latest();
    auto stalled = collector->stalled_for();
    long long stall_s = stalled.count() / 1000;
    if (data->generation != drawn || dirty || stall_s != last_stall_s) {
      overlay.prompt = prompt.mode == Mode::kNormal ? "" : prompt.question + prompt.input;
      draw(*data, view, style, overlay, stalled, o.readonly, o.period);
      drawn = data->generation;
      last_stall_s = stall_s;
      dirty = false;
    }
    int ch = getch();
    if (ch == ERR) continue;
    dirty = true;
    if (overlay.help) {
      overlay.help = false;
      continue;
    }
    if (prompt.mode == Mode::kConfirm) {
      prompt.mode = Mode::kNormal;
      if ((ch == 'y' || ch == 'Y') && busy()) {
        overlay.message = kBusy;
      } else if (ch == 'y' || ch == 'Y') {
        overlay.message = "working...";
        running = start_action([action = prompt.action] { return action(std::string()); });
      } else {
        overlay.message = "cancelled";
      }
      continue;
    }
    if (prompt.mode == Mode::kInput) {
      if (ch == '\n' || ch == KEY_ENTER) {
        prompt.mode = Mode::kNormal;
        auto act = std::move(prompt.action);  // it may set up the next prompt (a confirmation)
        overlay.message = act(prompt.input);
      } else if (ch == 27) {
        prompt.mode = Mode::kNormal;
        overlay.message = "cancelled";
      } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
        if (!prompt.input.empty()) prompt.input.pop_back();
      } else if (ch >= 32 && ch < 127 && prompt.input.size() < 64) {
        prompt.input += static_cast<char>(ch);
      }
      continue;
    }
    overlay.message.clear();
    switch (ch) {
      case 'q': case 'Q':
        // Leaving ends an action underway (a kill's SIGKILL after the timeout would never be sent): say so once.
        if (busy() && !quit_asked) {
          overlay.message = "an action is still running: q again to quit without waiting for it";
          quit_asked = true;
        } else {
          quit = true;
        }
        break;
      case 'h': case '?': overlay.help = true; break;
      case KEY_UP: --view.cursor; break;
      case KEY_DOWN: ++view.cursor; break;
      case KEY_PPAGE: view.cursor -= 10; break;
      case KEY_NPAGE: view.cursor += 10; break;
      case ' ': {
        auto rows = visible_rows(*data, view);
        if (view.cursor < static_cast<int>(rows.size())) {
          int pid = rows[view.cursor]->pid;
          if (!view.selected.erase(pid)) view.selected.insert(pid);
          ++view.cursor;
        }
        break;
      }
      case 'M': view.sort = SortKey::kMemory; break;
      case 'P': view.sort = SortKey::kPid; break;
      case 'U': view.sort = SortKey::kUser; break;
      case 'T': view.sort = SortKey::kTime; break;
      case 'g': {
        auto idx = data->sample.gpus;
        if (!view.gpu_filter) {
          if (!idx.empty()) view.gpu_filter = idx.front().index;
        } else {
          auto it = std::find_if(idx.begin(), idx.end(), [&](const auto& g) { return g.index == *view.gpu_filter; });
          if (it == idx.end() || ++it == idx.end()) view.gpu_filter.reset();
          else view.gpu_filter = it->index;
        }
        break;
      }
      case 'f':
        prompt.mode = Mode::kInput;
        prompt.question = "show user (empty: all): ";
        prompt.input = view.user_filter;
        prompt.action = [&view](const std::string& u) {
          view.user_filter = u;
          return u.empty() ? std::string("showing every user") : "showing " + u + "'s processes";
        };
        break;
      case 'k': {
        // As `gpumem kill` with its defaults (the same timeout before SIGKILL).
        std::ostringstream verb;
        verb << "Kill (TERM, then KILL after " << monitor::KillOptions{}.timeout_s << " s)";
        confirm(verb.str().c_str(), [one_per_pid](const std::vector<const ProcRow*>& rows) {
          // The processes shown when asked: one whose PID was reused since (the prompt may wait for
          // minutes) is not signalled.
          std::vector<monitor::KillTarget> targets;
          for (const ProcRow* r : one_per_pid(rows))
            targets.push_back({r->pid, r->proc ? std::optional(r->proc->start_time) : std::nullopt});
          return monitor::render_kill(monitor::kill_processes(targets, monitor::KillOptions{}));
        });
        break;
      }
      case 'c':
        confirm("Clear the allocator cache of", [pids_of](const std::vector<const ProcRow*>& rows) {
          return for_each_pid(pids_of(rows), [](int pid) {
            return std::to_string(pid) + ": released " + short_bytes(control::clear(pid));
          });
        });
        break;
      case 's':
        confirm("Gracefully stop", [pids_of](const std::vector<const ProcRow*>& rows) {
          return for_each_pid(pids_of(rows), [](int pid) {
            return std::to_string(pid) + ": stopping, released " + short_bytes(control::stop(pid));
          });
        });
        break;
      case 'l': {
        if (o.readonly) {
          overlay.message = "read-only: actions are off (started with --readonly)";
          break;
        }
        std::vector<std::pair<int, int>> t;
        for (const ProcRow* r : targets())
          if (r->control_device) t.emplace_back(r->pid, *r->control_device);
        if (t.empty()) {
          overlay.message = "limit: no gpumem process selected (its ALLOC column shows a value)";
          break;
        }
        prompt.mode = Mode::kInput;
        prompt.question = "limit for " + std::to_string(t.size()) + " process(es) (e.g. 8GiB or 0.5; Esc cancels): ";
        prompt.input.clear();
        // The value first, then a y/N confirmation as for every action.
        prompt.action = [t, &prompt](const std::string& text) {
          LimitAmount amount;
          try {
            amount = parse_limit_amount(text);
          } catch (const std::exception& e) {
            return std::string("limit not set: ") + e.what();
          }
          std::string who;
          for (auto [pid, device] : t)
            who += (who.empty() ? "" : ", ") + std::to_string(pid) + " (GPU " + std::to_string(device) + ")";
          prompt.question = "Set the limit of " + who + " to " + text + "? [y/N]";  // text is prompt.input
          prompt.mode = Mode::kConfirm;
          prompt.input.clear();
          prompt.action = [t, amount](const std::string&) { return limit_action(t, amount); };
          return std::string();
        };
        break;
      }
      default: break;
    }
  }
  // A sample still stuck in NVML after the grace period: leak the collector rather than wait for ever
  // (its thread ends once the driver answers; it never samples again).
  if (!collector->stop_within(std::chrono::milliseconds(1000))) collector.release();
  monitor::stop_handled();
  return quit ? 0 : monitor::stop_exit_code();
}

}  // namespace gpumem::tui
