// `gpumem kill`: stop processes that hold GPUs. Contract: kill_processes() checks each PID against the
// safety policy (never itself, its parent or PID 1; other users' processes only as root), sends the
// signal only to the process it examined (start time checked against PID reuse, and against the one the
// caller listed), waits up to the timeout for all of them together, escalates survivors to SIGKILL, and
// reports one outcome per PID.
#pragma once
#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "monitor/procfs.hpp"

namespace gpumem::monitor {

struct KillOptions {
  int signal = 15;          // SIGTERM
  double timeout_s = 10.0;  // before SIGKILL
  bool dry_run = false;
};

// kSignalled: a signal not meant to end the process (STOP, USR1, ...) was delivered; it may well live on.
enum class KillResult { kExited, kKilled, kSurvived, kRefused, kNoSuchProcess, kDryRun, kFailed, kSignalled };

struct KillOutcome {
  int pid = 0;
  std::string command;
  KillResult result = KillResult::kFailed;
  std::string detail;  // one sentence
};

// Why `target` may not be signalled by a caller with `euid`, `self` and `parent`; nullopt if allowed.
std::optional<std::string> kill_refusal(const ProcInfo& target, uid_t euid, int self, int parent);

// "TERM", "SIGTERM", "15" -> 15. Throws UsageError.
int parse_signal(const std::string& text);
std::string signal_name(int sig);

// A process to signal: its PID and, when it was chosen from a listing (top, --gpu, --user), its start
// time then. A PID reused since (another process, e.g. while a prompt waited) is not signalled.
struct KillTarget {
  int pid = 0;
  std::optional<unsigned long long> start_time;
};

std::vector<KillOutcome> kill_processes(const std::vector<KillTarget>& targets, const KillOptions& options);
// PIDs named now (the command line): whatever process holds each one.
std::vector<KillOutcome> kill_processes(const std::vector<int>& pids, const KillOptions& options);
std::string render_kill(const std::vector<KillOutcome>& outcomes);
nlohmann::ordered_json kill_json(const std::vector<KillOutcome>& outcomes);
// This one ended (exited, killed), was signalled as asked, or is a dry run.
bool kill_done(const KillOutcome& outcome);
// Exit status: every one done -> true.
bool kill_all_done(const std::vector<KillOutcome>& outcomes);

}  // namespace gpumem::monitor
