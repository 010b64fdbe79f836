#include "monitor/procfs.hpp"

#include <dirent.h>
#include <pwd.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace gpumem::monitor {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

bool all_digits(const char* s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (!std::isdigit(static_cast<unsigned char>(*s))) return false;
  return true;
}

// A run of 64 hex digits in a cgroup path is a container id (docker, containerd, cri-o, podman).
std::string container_from_cgroup(const std::string& cgroup) {
  size_t run = 0;
  for (size_t i = 0; i < cgroup.size(); ++i) {
    if (std::isxdigit(static_cast<unsigned char>(cgroup[i])) && !std::isupper(static_cast<unsigned char>(cgroup[i]))) {
      if (++run == 64) return cgroup.substr(i + 1 - 64, 12);
    } else {
      run = 0;
    }
  }
  return {};
}

}  // namespace

std::string user_name(uid_t uid) {
  struct passwd pw {};
  struct passwd* result = nullptr;
  char buf[1024];
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &result) == 0 && result) return pw.pw_name;
  return std::to_string(uid);
}

std::optional<uid_t> uid_of_user(const std::string& name) {
  if (!name.empty() && all_digits(name.c_str()) && name.size() <= 10) {  // a uid: up to 2^32 - 2
    const unsigned long long uid = std::stoull(name);
    if (uid < 0xFFFFFFFFull) return static_cast<uid_t>(uid);
  }
  struct passwd pw {};
  struct passwd* result = nullptr;
  char buf[1024];
  if (getpwnam_r(name.c_str(), &pw, buf, sizeof buf, &result) == 0 && result) return pw.pw_uid;
  return std::nullopt;
}

std::optional<ProcInfo> read_process(int pid) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = "/proc/" + std::to_string(pid);
  std::string stat = read_file(dir + "/stat");
  if (stat.empty()) return std::nullopt;
  ProcInfo p;
  p.pid = pid;
  size_t open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return std::nullopt;
  p.comm = stat.substr(open + 1, close - open - 1);
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  std::vector<std::string> f;
  while (rest >> field) f.push_back(field);
  // After "pid (comm)": state is field 3, ppid 4, starttime 22 (1-based, as in proc(5)).
  if (f.size() > 19) {
    p.zombie = f[0] == "Z" || f[0] == "X";
    p.ppid = std::atoi(f[1].c_str());
    p.start_time = std::strtoull(f[19].c_str(), nullptr, 10);
    p.cpu_ticks = std::strtoull(f[11].c_str(), nullptr, 10) + std::strtoull(f[12].c_str(), nullptr, 10);
    if (f.size() > 21) p.rss_bytes = std::strtoull(f[21].c_str(), nullptr, 10) * static_cast<unsigned long long>(sysconf(_SC_PAGESIZE));
  }
  std::istringstream status(read_file(dir + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) {
      p.uid = static_cast<uid_t>(std::strtoul(line.c_str() + 4, nullptr, 10));
    } else if (line.rfind("NSpid:", 0) == 0) {
      std::istringstream ids(line.substr(6));
      int id;
      while (ids >> id) p.nspids.push_back(id);
    }
  }
  if (p.uid != static_cast<uid_t>(-1)) p.user = user_name(p.uid);
  std::string cmd = read_file(dir + "/cmdline");
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd)
    if (c == '\0') c = ' ';
  p.cmdline = cmd;
  p.container = container_from_cgroup(read_file(dir + "/cgroup"));
  return p;
}

std::string device_dir() {
  const char* env = std::getenv("GPUMEM_DEV_DIR");
  std::string dir = (env && *env) ? env : "/dev";
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return dir;
}

HolderScan scan_device_holders(const std::string& dev_dir) {
  HolderScan scan;
  const std::string prefix = dev_dir + "/nvidia";
  DIR* proc = opendir("/proc");
  if (!proc) return scan;
  while (dirent* e = readdir(proc)) {
    if (!all_digits(e->d_name)) continue;
    int pid = std::atoi(e->d_name);
    if (pid == getpid()) continue;  // a monitor holds the nodes itself (NVML): it never lists itself
    std::string fd_dir = std::string("/proc/") + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (!fds) {
      ++scan.unreadable;
      continue;
    }
    std::set<unsigned> seen;
    while (dirent* fe = readdir(fds)) {
      if (!all_digits(fe->d_name)) continue;
      char target[512];
      ssize_t n = readlink((fd_dir + "/" + fe->d_name).c_str(), target, sizeof target - 1);
      if (n <= 0) continue;
      target[n] = '\0';
      std::string t(target);
      // Per-GPU nodes only: nvidia0, nvidia1... (not nvidiactl, nvidia-uvm, nvidia-caps).
      if (t.rfind(prefix, 0) != 0 || t.size() == prefix.size() || !all_digits(t.c_str() + prefix.size())) continue;
      unsigned minor = static_cast<unsigned>(std::strtoul(t.c_str() + prefix.size(), nullptr, 10));
      if (seen.insert(minor).second) scan.holders.push_back(DeviceHolder{pid, minor, t});
    }
    closedir(fds);
  }
  closedir(proc);
  return scan;
}

}  // namespace gpumem::monitor
