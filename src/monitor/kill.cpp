#include "monitor/kill.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "gpumem/printable.hpp"
#include "monitor/common.hpp"

namespace gpumem::monitor {
namespace {

struct SignalEntry {
  int sig;
  const char* name;
};
// The names `kill -l` lists on Linux (the real-time range is taken by number).
constexpr SignalEntry kSignals[] = {
    {SIGHUP, "HUP"},     {SIGINT, "INT"},       {SIGQUIT, "QUIT"}, {SIGILL, "ILL"},     {SIGTRAP, "TRAP"},
    {SIGABRT, "ABRT"},   {SIGBUS, "BUS"},       {SIGFPE, "FPE"},   {SIGKILL, "KILL"},   {SIGUSR1, "USR1"},
    {SIGSEGV, "SEGV"},   {SIGUSR2, "USR2"},     {SIGPIPE, "PIPE"}, {SIGALRM, "ALRM"},   {SIGTERM, "TERM"},
    {SIGSTKFLT, "STKFLT"}, {SIGCHLD, "CHLD"},   {SIGCONT, "CONT"}, {SIGSTOP, "STOP"},   {SIGTSTP, "TSTP"},
    {SIGTTIN, "TTIN"},   {SIGTTOU, "TTOU"},     {SIGURG, "URG"},   {SIGXCPU, "XCPU"},   {SIGXFSZ, "XFSZ"},
    {SIGVTALRM, "VTALRM"}, {SIGPROF, "PROF"},   {SIGWINCH, "WINCH"}, {SIGIO, "IO"},     {SIGPWR, "PWR"},
    {SIGSYS, "SYS"},     {SIGIOT, "IOT"},       {SIGPOLL, "POLL"}};

// Alive means: the same process (start time unchanged) exists and is not a zombie.
bool same_process_alive(int pid, unsigned long long start_time) {
  auto p = read_process(pid);
  return p && !p->zombie && p->start_time == start_time;
}

}  // namespace

int parse_signal(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  if (t.rfind("SIG", 0) == 0) t = t.substr(3);
  if (!t.empty() && std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); }) && t.size() < 4) {
    int v = std::stoi(t);
    if (v >= 1 && v < NSIG) return v;
  }
  for (const auto& s : kSignals)
    if (t == s.name) return s.sig;
  throw UsageError("unknown signal '" + text + "' (use TERM, KILL, INT, HUP, USR1, ... or a number).");
}

std::string signal_name(int sig) {
  for (const auto& s : kSignals)
    if (s.sig == sig) return std::string("SIG") + s.name;
  return "signal " + std::to_string(sig);
}

std::optional<std::string> kill_refusal(const ProcInfo& target, uid_t euid, int self, int parent) {
  if (target.pid == 1) return "refused: PID 1 is init";
  if (target.pid == 2 || target.ppid == 2) return "refused: PID " + std::to_string(target.pid) + " is a kernel thread";
  if (target.pid == self) return "refused: that is gpumem itself";
  if (target.pid == parent) return "refused: that is gpumem's parent process";
  if (euid != 0 && target.uid != euid)
    return "refused: owned by user " + target.user + " (only root may signal other users' processes)";
  return std::nullopt;
}

std::vector<KillOutcome> kill_processes(const std::vector<int>& pids, const KillOptions& options) {
  std::vector<KillTarget> targets;
  for (int pid : pids) targets.push_back(KillTarget{pid, std::nullopt});
  return kill_processes(targets, options);
}

std::vector<KillOutcome> kill_processes(const std::vector<KillTarget>& targets, const KillOptions& options) {
  using Clock = std::chrono::steady_clock;
  struct Pending {
    size_t outcome;
    unsigned long long start_time;
  };
  std::vector<KillOutcome> out;
  std::vector<Pending> pending;
  const int self = static_cast<int>(getpid()), parent = static_cast<int>(getppid());
  // gpumem's ancestors (the shell that ran it, the terminal, ...): signalling them would end this session.
  std::set<int> ancestors;
  for (auto p = read_process(parent); p && p->ppid > 1 && ancestors.size() < 4096; p = read_process(p->ppid))
    if (!ancestors.insert(p->ppid).second) break;
  const uid_t euid = geteuid();
  const auto started = Clock::now();
  for (const KillTarget& target : targets) {
    const int pid = target.pid;
    KillOutcome o;
    o.pid = pid;
    auto p = read_process(pid);
    if (!p || p->zombie) {
      o.result = KillResult::kNoSuchProcess;
      o.detail = "no such process";
      out.push_back(o);
      continue;
    }
    if (target.start_time && p->start_time != *target.start_time) {
      o.result = KillResult::kNoSuchProcess;
      o.detail = "not signalled: the process listed ended, and its PID now belongs to another process";
      out.push_back(o);
      continue;
    }
    o.command = p->cmdline.empty() ? "[" + p->comm + "]" : p->cmdline;
    if (auto why = kill_refusal(*p, euid, self, parent)) {
      o.result = KillResult::kRefused;
      o.detail = *why;
    } else if (ancestors.count(pid)) {
      o.result = KillResult::kRefused;
      o.detail = "refused: that is an ancestor of gpumem (the shell or terminal that started it)";
    } else if (options.dry_run) {
      o.result = KillResult::kDryRun;
      o.detail = "would send " + signal_name(options.signal);
    } else if (::kill(pid, options.signal) != 0) {
      o.result = errno == ESRCH ? KillResult::kNoSuchProcess : KillResult::kFailed;
      o.detail = std::string("could not send ") + signal_name(options.signal) + ": " + std::strerror(errno);
    } else {
      pending.push_back(Pending{out.size(), p->start_time});
    }
    out.push_back(o);
  }

  auto wait_for = [&](double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (true) {
      for (auto it = pending.begin(); it != pending.end();) {
        if (same_process_alive(out[it->outcome].pid, it->start_time)) {
          ++it;
          continue;
        }
        double s = std::chrono::duration<double>(Clock::now() - started).count();
        char buf[96];
        std::snprintf(buf, sizeof buf, " after %.1f s", s);
        KillOutcome& o = out[it->outcome];
        if (o.result == KillResult::kKilled) o.detail = "killed with SIGKILL" + std::string(buf);
        else o.result = KillResult::kExited, o.detail = "exited on " + signal_name(options.signal) + buf;
        it = pending.erase(it);
      }
      if (pending.empty() || Clock::now() >= deadline) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  // A signal other than TERM/INT/HUP/QUIT/KILL (USR1, STOP...) is not meant to end the process.
  const bool ends = options.signal == SIGTERM || options.signal == SIGINT || options.signal == SIGHUP ||
                    options.signal == SIGQUIT || options.signal == SIGKILL;
  if (!ends) {
    for (const Pending& p : pending) out[p.outcome].result = KillResult::kSignalled, out[p.outcome].detail = "sent " + signal_name(options.signal);
    return out;
  }
  wait_for(options.timeout_s);
  if (options.signal != SIGKILL) {
    for (const Pending& p : pending) {
      KillOutcome& o = out[p.outcome];
      o.result = KillResult::kKilled;
      if (same_process_alive(o.pid, p.start_time)) ::kill(o.pid, SIGKILL);
    }
    wait_for(5.0);  // SIGKILL is final, but a process in uninterruptible sleep (GPU teardown) can take a while
  }
  for (const Pending& p : pending) {
    KillOutcome& o = out[p.outcome];
    o.result = KillResult::kSurvived;
    o.detail = "still running after " + signal_name(options.signal) +
               (options.signal == SIGKILL ? "" : " and SIGKILL") + " (stuck in the kernel?)";
  }
  return out;
}

std::string render_kill(const std::vector<KillOutcome>& outcomes) {
  std::string text;
  for (const KillOutcome& o : outcomes) {
    std::string cmd = printable(o.command);  // a name must not drive the terminal
    if (cmd.size() > 50) cmd = cmd.substr(0, 47) + "...";
    text += "PID " + std::to_string(o.pid) + (cmd.empty() ? "" : " (" + cmd + ")") + ": " + o.detail + "\n";
  }
  return text;
}

nlohmann::ordered_json kill_json(const std::vector<KillOutcome>& outcomes) {
  static const char* names[] = {"exited", "killed", "survived", "refused", "no_such_process", "dry_run", "failed", "signalled"};
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const KillOutcome& o : outcomes)
    j.push_back({{"pid", o.pid}, {"command", o.command.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.command)},
                 {"result", names[static_cast<int>(o.result)]}, {"detail", o.detail}});
  return j;
}

bool kill_done(const KillOutcome& o) {
  return o.result == KillResult::kExited || o.result == KillResult::kKilled || o.result == KillResult::kDryRun ||
         o.result == KillResult::kSignalled;
}

bool kill_all_done(const std::vector<KillOutcome>& outcomes) {
  return std::all_of(outcomes.begin(), outcomes.end(), kill_done);
}

}  // namespace gpumem::monitor
