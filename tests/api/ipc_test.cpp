// CUDA IPC through the C ABI on the host backend: an allocation stitched from several chunks is exported,
// opened by a second process (fork; the descriptors cross as CUDA IPC's do), read and written there.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <string>

#include "gpumem/gpumem.h"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"

namespace {

constexpr int kDevice = 5;
constexpr std::size_t kMiB = std::size_t(1) << 20;

class HostBackendEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    gpumem::set_backend_factory([](int) {
      gpumem::HostBackendOptions o;
      o.capacity = 64 * kMiB;
      o.granularity = 64 << 10;
      return std::make_shared<gpumem::HostBackend>(o);
    });
  }
};
const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new HostBackendEnvironment);

std::string export_description(void* ptr) {
  char small[8];
  int needed = gpumem_ipc_export(ptr, small, sizeof small);  // too small: descriptors closed, length given
  EXPECT_GT(needed, int(sizeof small)) << gpumem_last_error();
  std::string buf(std::size_t(needed) + 1, '\0');
  EXPECT_EQ(gpumem_ipc_export(ptr, buf.data(), buf.size()), needed);
  buf.resize(std::size_t(needed));
  return buf;
}

TEST(Ipc, StitchedAllocationIsReadAndWrittenByAnotherProcess) {
  ASSERT_EQ(gpumem_set_limit(4 * kMiB, kDevice), GPUMEM_OK);
  void *a = nullptr, *b = nullptr, *p = nullptr;
  ASSERT_EQ(gpumem_allocate(2 * kMiB, kDevice, nullptr, &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(2 * kMiB, kDevice, nullptr, &b), GPUMEM_OK);
  gpumem_deallocate(a, kDevice, nullptr);
  gpumem_deallocate(b, kDevice, nullptr);
  ASSERT_EQ(gpumem_allocate(3 * kMiB, kDevice, nullptr, &p), GPUMEM_OK) << gpumem_last_error();
  std::memset(p, 0x5a, 3 * kMiB);

  const std::string description = export_description(p);
  nlohmann::json j = nlohmann::json::parse(description);
  EXPECT_GE(j["pieces"].size(), 2u) << "expected a block stitched from several chunks: " << description;

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    void* mine = nullptr;
    if (gpumem_ipc_open(kDevice, description.c_str(), &mine) != GPUMEM_OK) _exit(2);
    auto* bytes = static_cast<unsigned char*>(mine);
    bool saw = mine != p && bytes[0] == 0x5a && bytes[3 * kMiB - 1] == 0x5a;
    std::memset(bytes + kMiB, 0x77, kMiB);
    if (gpumem_ipc_close(mine) != GPUMEM_OK) _exit(3);
    _exit(saw ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the receiver crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: did not see the bytes, 2: open failed, 3: close failed";
  auto* bytes = static_cast<unsigned char*>(p);
  EXPECT_EQ(bytes[kMiB - 1], 0x5a);
  EXPECT_EQ(bytes[kMiB], 0x77) << "the receiver's write is not seen by the exporter";
  EXPECT_EQ(bytes[2 * kMiB - 1], 0x77);
  for (const auto& piece : j["pieces"])
    for (int fd : piece["fds"]) close(fd);

  // The receiving side in this process too: open, the memory outlives the exporter's free, close.
  const std::string again = export_description(p);
  void* opened = nullptr;
  ASSERT_EQ(gpumem_ipc_open(kDevice, again.c_str(), &opened), GPUMEM_OK) << gpumem_last_error();
  const nlohmann::json described = nlohmann::json::parse(again);  // kept: the loop must not walk a temporary
  for (const auto& piece : described["pieces"])
    for (int fd : piece["fds"]) close(fd);
  gpumem_deallocate(p, kDevice, nullptr);
  EXPECT_EQ(static_cast<unsigned char*>(opened)[0], 0x5a);
  EXPECT_EQ(gpumem_ipc_close(opened), GPUMEM_OK);
  EXPECT_EQ(gpumem_ipc_close(opened), GPUMEM_E_INVALID);
}

TEST(Ipc, BadInputIsOneClearError) {
  void* out = nullptr;
  int x = 0;
  EXPECT_EQ(gpumem_ipc_export(&x, nullptr, 0), GPUMEM_E_INVALID);
  EXPECT_NE(std::string(gpumem_last_error()).find("not a live gpumem allocation"), std::string::npos);
  EXPECT_EQ(gpumem_ipc_open(kDevice, "not json", &out), GPUMEM_E_INVALID);
  EXPECT_EQ(gpumem_ipc_open(kDevice, R"({"offset":0,"bytes":65536,"pieces":[{"fds":[-1],"chunk_bytes":65536,"offset":0,"bytes":65536}]})", &out),
            GPUMEM_E_BACKEND);
  EXPECT_EQ(out, nullptr);
  EXPECT_EQ(gpumem_ipc_open(kDevice, R"({"offset":0,"bytes":65536,"pieces":[]})", &out), GPUMEM_E_INVALID);
  // Descriptors that are not numbers: a bad description, not an internal error from the JSON library.
  EXPECT_EQ(gpumem_ipc_open(kDevice, R"({"offset":0,"bytes":65536,"pieces":[{"fds":["a"],"chunk_bytes":65536,"offset":0,"bytes":65536}]})", &out),
            GPUMEM_E_INVALID);
  EXPECT_NE(std::string(gpumem_last_error()).find("lacks its descriptors"), std::string::npos) << gpumem_last_error();
}

}  // namespace
