// Which Kubernetes pod a process runs in. Contract: pod_uid_from_cgroup() reads the pod UID that the
// kubelet writes into every cgroup path it creates (cgroupfs "pod<uid>" and systemd
// "kubepods-...-pod<uid_with_underscores>.slice"); read_pod_identity() adds the pod's name and
// namespace where the process itself carries them: HOSTNAME in its environment (the pod name, unless
// the pod sets hostname) and the namespace file of its mounted service account. Anything unreadable
// (another user's process without root) stays empty; nothing here throws.
#pragma once
#include <string>

namespace gpumem::exporter {

struct PodIdentity {
  std::string uid, name, namespace_;
};

std::string pod_uid_from_cgroup(const std::string& cgroup_text);

// proc_dir is /proc except in tests, which point it at a directory shaped like /proc.
PodIdentity read_pod_identity(int pid, const std::string& proc_dir = "/proc");

}  // namespace gpumem::exporter
