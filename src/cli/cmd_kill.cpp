// gpumem kill: SIGTERM, wait, SIGKILL, for PIDs or for whatever holds a GPU (--gpu, --user, --ghosts).
#include <algorithm>
#include <memory>
#include <cstdio>
#include <optional>
#include <set>

#include "cli/command.hpp"
#include "cli/monitor_cli.hpp"
#include "cli/output.hpp"
#include "gpumem/printable.hpp"
#include "monitor/procfs.hpp"
#include "monitor/kill.hpp"
#include "monitor/ps.hpp"

namespace gpumem::cli {
namespace {

struct KillArgs {
  std::vector<int> pids;
  std::vector<std::string> gpus;
  std::string user, signal = "TERM";
  double timeout = 10.0;
  bool ghosts = false, dry_run = false, json = false;
};

int run_kill(const KillArgs& a) {
  monitor::KillOptions opt;
  opt.signal = monitor::parse_signal(a.signal);
  if (!(a.timeout >= 0 && a.timeout < 1e6)) throw monitor::UsageError("--timeout needs seconds from 0 to 999999.");
  opt.timeout_s = a.timeout;
  opt.dry_run = a.dry_run;
  if (a.pids.empty() && a.gpus.empty() && a.user.empty() && !a.ghosts)
    throw monitor::UsageError("give PIDs, --gpu N, --user U or --ghosts.");
  std::optional<uid_t> uid;
  if (!a.user.empty()) {
    uid = monitor::uid_of_user(a.user);
    if (!uid) throw monitor::UsageError("no such user '" + a.user + "'.");
  }
  // --gpu and --ghosts choose processes; --user narrows everything to that user's ("only processes of
  // user U"), named PIDs too, and chooses that user's GPU processes only when no PID is named.
  const bool by_selection = !a.gpus.empty() || a.ghosts || (uid && a.pids.empty());
  // Processes chosen from a listing (or checked against --user) carry their start time then: a PID
  // reused before the signal goes is not signalled.
  std::vector<monitor::KillTarget> targets;
  bool named_left_alone = false;  // a PID given by name that --user excluded: not all that was asked is done
  for (int pid : a.pids) {  // each once (the option's pid_validator refused anything but a positive number)
    if (std::any_of(targets.begin(), targets.end(), [pid](const auto& t) { return t.pid == pid; })) continue;
    monitor::KillTarget target{pid, std::nullopt};
    if (uid) {
      const auto p = monitor::read_process(pid);  // a PID that is gone stays: kill reports it
      if (p && p->uid != *uid) {
        std::fprintf(stderr, "gpumem kill: PID %d belongs to %s, not %s: left alone.\n", pid,
                     printable(p->user).c_str(), printable(a.user).c_str());
        named_left_alone = true;
        continue;
      }
      if (p) target.start_time = p->start_time;  // the process checked is the one signalled
    }
    targets.push_back(target);
  }
  if (by_selection) {
    auto nvml = nvml::Nvml::open();
    std::string ids;
    for (const auto& g : a.gpus) ids += (ids.empty() ? "" : ",") + g;
    auto report = monitor::collect_ps(*nvml, monitor::select_gpus(*nvml, ids), monitor::device_dir());
    std::set<int> chosen;
    for (const auto& t : targets) chosen.insert(t.pid);
    for (const monitor::PsEntry& e : report.entries) {
      if (e.kind == monitor::PsKind::kGone || !e.proc) continue;  // nothing to signal
      if (a.ghosts && e.kind != monitor::PsKind::kNoContext) continue;
      if (uid && e.proc->uid != *uid) continue;
      // Driver daemons (persistenced, fabric manager, DCGM) are never chosen: only named.
      if (monitor::is_driver_daemon(*e.proc)) {
        if (!chosen.count(e.pid)) std::fprintf(stderr, "gpumem kill: PID %d (%s) is a driver daemon: left alone (name it to signal it).\n", e.pid, printable(e.proc->comm).c_str());
        chosen.insert(e.pid);  // said once (a process on several GPUs)
        continue;
      }
      if (chosen.insert(e.pid).second) targets.push_back(monitor::KillTarget{e.pid, e.proc->start_time});
    }
  }
  if (targets.empty()) {
    if (a.json) std::printf("[]\n");
    else std::printf("No process matches.\n");
    return named_left_alone ? kExitPartial : kExitOk;
  }
  auto outcomes = monitor::kill_processes(targets, opt);
  std::string text = a.json ? json_text(monitor::kill_json(outcomes)) : monitor::render_kill(outcomes);
  std::fwrite(text.data(), 1, text.size(), stdout);
  const auto not_done = [](const monitor::KillOutcome& o) { return !monitor::kill_done(o); };
  if (const auto first = std::find_if(outcomes.begin(), outcomes.end(), not_done); first != outcomes.end()) {
    // The exit status says "partly done": stderr says why, once.
    const auto left = std::size_t(std::count_if(outcomes.begin(), outcomes.end(), not_done));
    std::fflush(stdout);
    std::fprintf(stderr, "gpumem kill: %zu of %zu processes not stopped (PID %d: %s%s).\n", left, outcomes.size(),
                 first->pid, first->detail.c_str(), left > 1 ? "; the others above" : "");
  }
  return monitor::kill_all_done(outcomes) && !named_left_alone ? kExitOk : kExitPartial;
}

}  // namespace

GPUMEM_REGISTER_COMMAND(
    kill, "kill", "stop processes holding GPUs: SIGTERM, wait, then SIGKILL", 50, [](CLI::App& sub) -> CommandRunner {
      auto a = std::make_shared<KillArgs>();
      sub.add_option("pids", a->pids, "process ids")->check(pid_validator());
      sub.add_option("--gpu", a->gpus, "every process using GPU N (index, UUID or PCI bus id)");
      sub.add_option("--user", a->user, "only processes of user U (name or uid)");
      sub.add_flag("--ghosts", a->ghosts, "processes holding /dev/nvidia* without a CUDA context (not driver daemons)");
      sub.add_option("--signal", a->signal, "first signal (default TERM)");
      sub.add_option("--timeout", a->timeout, "seconds to wait before SIGKILL (default 10)");
      sub.add_flag("--dry-run", a->dry_run, "show what would be signalled, signal nothing");
      sub.add_flag("--json", a->json, "print JSON");
      return [a] { return run_monitor_command("kill", [&] { return run_kill(*a); }); };
    });

}  // namespace gpumem::cli
