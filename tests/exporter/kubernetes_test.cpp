// Kubernetes pod identity from cgroup paths and from a /proc-shaped directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "exporter/kubernetes.hpp"

namespace gpumem::exporter {
namespace {

TEST(ExporterKubernetes, PodUidFromCgroupfsPath) {
  EXPECT_EQ(pod_uid_from_cgroup("0::/kubepods/burstable/pod3f8d2c1e-1a2b-4c3d-8e9f-0123456789ab/"
                                "4b825dc642cb6eb9a060e54bf8d69288fbee4904aaaaaaaaaaaaaaaaaaaaaaaa\n"),
            "3f8d2c1e-1a2b-4c3d-8e9f-0123456789ab");
}

TEST(ExporterKubernetes, PodUidFromSystemdSlice) {
  EXPECT_EQ(pod_uid_from_cgroup("12:memory:/system.slice\n0::/kubepods.slice/kubepods-besteffort.slice/"
                                "kubepods-besteffort-pod3f8d2c1e_1a2b_4c3d_8e9f_0123456789ab.slice/"
                                "cri-containerd-4b825dc642cb6eb9a060e54bf8d69288fbee4904aaaaaaaaaaaaaaaaaaaaaaaa.scope\n"),
            "3f8d2c1e-1a2b-4c3d-8e9f-0123456789ab");
}

TEST(ExporterKubernetes, NoPodOutsideKubernetes) {
  EXPECT_EQ(pod_uid_from_cgroup("0::/user.slice/user-1000.slice/session-2.scope\n"), "");
  EXPECT_EQ(pod_uid_from_cgroup("0::/docker/4b825dc642cb6eb9a060e54bf8d69288fbee4904aaaaaaaaaaaaaaaaaaaaaaaa\n"), "");
  EXPECT_EQ(pod_uid_from_cgroup("0::/kubepods/podnot-a-uid/x\n"), "");
  EXPECT_EQ(pod_uid_from_cgroup(""), "");
}

TEST(ExporterKubernetes, NameAndNamespaceFromTheProcess) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("gpumem-k8s-" + std::to_string(getpid()));
  fs::path dir = root / "4242";
  fs::create_directories(dir / "root/var/run/secrets/kubernetes.io/serviceaccount");
  std::ofstream(dir / "cgroup") << "0::/kubepods/besteffort/pod3f8d2c1e-1a2b-4c3d-8e9f-0123456789ab/abc\n";
  std::string environ("PATH=/bin\0HOSTNAME=train-0\0KUBERNETES_SERVICE_HOST=10.0.0.1\0", 56);
  std::ofstream(dir / "environ", std::ios::binary) << environ;
  std::ofstream(dir / "root/var/run/secrets/kubernetes.io/serviceaccount/namespace") << "ml-team\n";
  PodIdentity id = read_pod_identity(4242, root.string());
  EXPECT_EQ(id.uid, "3f8d2c1e-1a2b-4c3d-8e9f-0123456789ab");
  EXPECT_EQ(id.name, "train-0");
  EXPECT_EQ(id.namespace_, "ml-team");
  // Not a Kubernetes process (no pod in its cgroup): nothing else is read.
  std::ofstream(dir / "cgroup") << "0::/user.slice\n";
  PodIdentity none = read_pod_identity(4242, root.string());
  EXPECT_EQ(none.uid + none.name + none.namespace_, "");
  // A PID that does not exist.
  EXPECT_EQ(read_pod_identity(1, root.string()).uid, "");
  fs::remove_all(root);
}

}  // namespace
}  // namespace gpumem::exporter
