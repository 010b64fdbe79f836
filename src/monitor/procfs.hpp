// What /proc says about a process, and which processes hold the per-GPU device nodes open.
// Contract: read_process() returns nullopt for a PID that does not exist (a zombie exists, flagged);
// unreadable details stay empty rather than failing. The device-node directory is /dev unless
// GPUMEM_DEV_DIR names another one (the tests point it at a directory of stand-in files).
#pragma once
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gpumem::monitor {

struct ProcInfo {
  int pid = 0;
  int ppid = 0;
  bool zombie = false;
  uid_t uid = static_cast<uid_t>(-1);
  std::string user;         // name, or the uid as text
  std::string comm;         // kernel's short name
  std::string cmdline;      // arguments joined by spaces; empty for kernel threads
  unsigned long long start_time = 0;  // clock ticks after boot: tells a reused PID apart
  unsigned long long cpu_ticks = 0;   // user + system time, clock ticks (for %CPU between samples)
  unsigned long long rss_bytes = 0;   // resident host memory
  std::vector<int> nspids;  // NSpid: this PID in each nested namespace, outermost first
  std::string container;    // short container id from the cgroup path, if any
  // The PID inside the process's own namespace when it differs (a container's view).
  std::optional<int> inner_pid() const {
    if (nspids.size() > 1 && nspids.back() != pid) return nspids.back();
    return std::nullopt;
  }
};

std::optional<ProcInfo> read_process(int pid);
std::string user_name(uid_t uid);
std::optional<uid_t> uid_of_user(const std::string& name_or_uid);

struct DeviceHolder {
  int pid = 0;
  unsigned minor = 0;  // N of <dev>/nvidiaN
  std::string node;    // path as linked from /proc/PID/fd
};
struct HolderScan {
  std::vector<DeviceHolder> holders;  // one per (pid, node)
  unsigned unreadable = 0;            // processes whose fds we may not read (other users, not root)
};

std::string device_dir();
HolderScan scan_device_holders(const std::string& dev_dir);

}  // namespace gpumem::monitor
