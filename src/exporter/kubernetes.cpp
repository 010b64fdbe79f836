#include "exporter/kubernetes.hpp"

#include <cctype>
#include <fstream>
#include <sstream>

namespace gpumem::exporter {
namespace {

std::string slurp(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return {};
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// 8-4-4-4-12 hex digits, the separator being '-' (cgroupfs) or '_' (systemd slice names).
bool is_uid_at(const std::string& s, size_t at) {
  static constexpr size_t kDashes[] = {8, 13, 18, 23};
  if (at + 36 > s.size()) return false;
  for (size_t i = 0; i < 36; ++i) {
    char c = s[at + i];
    bool dash_pos = i == kDashes[0] || i == kDashes[1] || i == kDashes[2] || i == kDashes[3];
    if (dash_pos ? (c != '-' && c != '_') : !std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return at + 36 == s.size() || !std::isxdigit(static_cast<unsigned char>(s[at + 36]));
}

std::string environ_value(const std::string& environ, const std::string& key) {
  std::string prefix = key + "=";
  size_t start = 0;
  while (start < environ.size()) {
    size_t end = environ.find('\0', start);
    if (end == std::string::npos) end = environ.size();
    if (environ.compare(start, prefix.size(), prefix) == 0) return environ.substr(start + prefix.size(), end - start - prefix.size());
    start = end + 1;
  }
  return {};
}

bool is_dns_label(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s)
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) return false;
  return true;
}

}  // namespace

std::string pod_uid_from_cgroup(const std::string& cgroup_text) {
  std::istringstream lines(cgroup_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("kubepods") == std::string::npos) continue;
    for (size_t at = line.find("pod"); at != std::string::npos; at = line.find("pod", at + 1)) {
      if (!is_uid_at(line, at + 3)) continue;
      std::string uid = line.substr(at + 3, 36);
      for (char& c : uid)
        if (c == '_') c = '-';
      return uid;
    }
  }
  return {};
}

PodIdentity read_pod_identity(int pid, const std::string& proc_dir) {
  PodIdentity id;
  const std::string dir = proc_dir + "/" + std::to_string(pid);
  id.uid = pod_uid_from_cgroup(slurp(dir + "/cgroup", 64 << 10));
  if (id.uid.empty()) return id;
  const std::string environ = slurp(dir + "/environ", 256 << 10);
  if (!environ_value(environ, "KUBERNETES_SERVICE_HOST").empty()) {
    std::string host = environ_value(environ, "HOSTNAME");
    if (is_dns_label(host)) id.name = host;
  }
  std::string ns = slurp(dir + "/root/var/run/secrets/kubernetes.io/serviceaccount/namespace", 256);
  while (!ns.empty() && std::isspace(static_cast<unsigned char>(ns.back()))) ns.pop_back();
  if (is_dns_label(ns)) id.namespace_ = ns;
  return id;
}

}  // namespace gpumem::exporter
