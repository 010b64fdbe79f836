// Host-specific checks of the host backend: what the kernel sees (page protections, file descriptors)
// and how syscall failures surface. The portable contract is in the conformance suite.
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "gpumem/host_backend.hpp"

namespace gpumem {
namespace {

constexpr std::size_t kGran = std::size_t(64) << 10;

HostBackendOptions small() {
  HostBackendOptions o;
  o.capacity = std::size_t(64) << 20;
  o.granularity = kGran;
  return o;
}

// The permissions ("rw-s", "---p", ...) of the mapping holding addr, or "" when nothing is mapped there.
std::string protection_at(DevicePtr addr) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %7s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) return perms;
  }
  return "";
}

std::size_t open_fds() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

TEST(HostBackend, RejectsBadGranularity) {
  for (std::size_t g : {std::size_t(0), std::size_t(3) << 20, std::size_t(1024)}) {
    HostBackendOptions o = small();
    o.granularity = g;
    EXPECT_THROW(HostBackend{o}, BackendError) << "granularity " << g;
  }
}

TEST(HostBackend, PagesAreInaccessibleUnlessMapped) {
  HostBackend b(small());
  DevicePtr va = b.reserve(4 * kGran);
  EXPECT_EQ(protection_at(va), "---p");
  EXPECT_EQ(protection_at(va + 4 * kGran - 1), "---p");
  ChunkHandle c = b.create_chunk(kGran);
  b.map(va + kGran, kGran, c, 0);
  EXPECT_EQ(protection_at(va + kGran), "rw-s");
  EXPECT_EQ(protection_at(va), "---p") << "mapping one page opened its neighbour";
  EXPECT_EQ(protection_at(va + 2 * kGran), "---p");
  // Fresh chunks read as zeros, like freshly mapped device memory on the host side of a test.
  const auto* bytes = reinterpret_cast<const unsigned char*>(va + kGran);
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[kGran - 1], 0);
  b.unmap(va + kGran, kGran);
  EXPECT_EQ(protection_at(va + kGran), "---p") << "unmap must keep the range reserved";
  b.release_chunk(c);
  b.release_range(va, 4 * kGran);
  EXPECT_EQ(protection_at(va), "") << "release_range left the range mapped";
}

TEST(HostBackend, MapOutsideAReservedRangeOrOverlappingIsRejected) {
  HostBackend b(small());
  DevicePtr va = b.reserve(4 * kGran);
  ChunkHandle c = b.create_chunk(2 * kGran);
  EXPECT_THROW(b.map(va + 3 * kGran, 2 * kGran, c, 0), BackendError) << "runs past the range";
  EXPECT_THROW(b.map(va + 8 * kGran, kGran, c, 0), BackendError) << "outside any range";
  b.map(va, 2 * kGran, c, 0);
  EXPECT_THROW(b.map(va + kGran, kGran, c, 0), BackendError) << "overlaps the first mapping";
  EXPECT_EQ(b.live_mappings(), 1u);
  EXPECT_EQ(protection_at(va), "rw-s") << "a rejected map disturbed the existing one";
  b.unmap(va, kGran);  // not exactly an earlier map's range: ignored
  EXPECT_EQ(b.live_mappings(), 1u);
  b.unmap(va, 2 * kGran);
  b.release_chunk(c);
  b.release_range(va, 4 * kGran);
}

TEST(HostBackend, ReleasingARangeForgetsMappingsLeftInside) {
  HostBackend b(small());
  DevicePtr va = b.reserve(2 * kGran);
  ChunkHandle c = b.create_chunk(kGran);
  b.map(va, kGran, c, 0);
  b.release_range(va, 2 * kGran);
  EXPECT_EQ(b.live_mappings(), 0u);
  EXPECT_EQ(b.live_ranges(), 0u);
  b.release_chunk(c);
  EXPECT_EQ(b.used_bytes(), 0u);
}

TEST(HostBackend, DestructionGivesEverythingBack) {
  const std::size_t fds = open_fds();
  DevicePtr va = 0, plain = 0;
  {
    HostBackend b(small());
    va = b.reserve(4 * kGran);
    for (int i = 0; i < 3; ++i) b.map(va + i * kGran, kGran, b.create_chunk(kGran), 0);
    b.create_chunk(kGran);  // never mapped
    plain = b.allocate(100);
    EXPECT_EQ(open_fds(), fds + 4);
  }
  EXPECT_EQ(open_fds(), fds) << "chunk file descriptors leaked";
  EXPECT_EQ(protection_at(va), "");
  EXPECT_EQ(protection_at(plain), "");
}

TEST(HostBackend, SyscallFailuresCarryTheErrnoText) {
  HostBackend b(small());
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit tight = old;
  const int lowest_free = ::dup(0);  // every descriptor below it is taken, so a limit here leaves none
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  tight.rlim_cur = rlim_t(lowest_free);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &tight), 0);
  std::exception_ptr error;
  try {
    b.create_chunk(kGran);
  } catch (...) {
    error = std::current_exception();  // looked at only after the limit is back (sanitizers need fds)
  }
  ::setrlimit(RLIMIT_NOFILE, &old);
  std::string what;
  try {
    if (error) std::rethrow_exception(error);
  } catch (const BackendError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("memfd_create"), std::string::npos) << what;
  EXPECT_NE(what.find("Too many open files"), std::string::npos) << what;
  EXPECT_EQ(b.used_bytes(), 0u) << "a failed create kept its capacity";
  EXPECT_EQ(b.live_chunks(), 0u);
}

TEST(HostBackend, HugeReservationsAreOutOfMemory) {
  HostBackend b(small());
  const std::size_t pib = std::size_t(1) << 50;
  try {
    b.reserve(pib);
    FAIL() << "reserving 1 PiB succeeded";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("1.00 PiB"), std::string::npos) << e.what();
  }
  EXPECT_THROW(b.reserve(SIZE_MAX - kGran + 1), OutOfMemoryError);
  EXPECT_THROW(b.allocate(SIZE_MAX), OutOfMemoryError);
  EXPECT_EQ(b.live_ranges(), 0u);
  EXPECT_EQ(b.used_bytes(), 0u);
}

TEST(HostBackend, AutomaticEventsCompleteAtOnce) {
  HostBackend b(small());
  EventHandle e = b.record_event(5);
  EXPECT_TRUE(b.event_done(e));
  EXPECT_EQ(b.pending_events(), 1u);
  b.release_event(e);
  EXPECT_EQ(b.pending_events(), 0u);
}

// Two real processes: the exporter's memfd crosses a Unix socket (SCM_RIGHTS, as CUDA IPC's descriptors
// do); the receiver imports it into its own backend, reads the exporter's bytes and writes its answer.
void send_fd(int socket, int fd) {
  char token = 'x';
  iovec iov{&token, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ASSERT_EQ(sendmsg(socket, &msg, 0), 1);
}

int receive_fd(int socket) {
  char token;
  iovec iov{&token, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  if (recvmsg(socket, &msg, 0) != 1) return -1;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

TEST(HostBackend, ExportedChunkCrossesToAnotherProcess) {
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sockets), 0);
  HostBackend exporter(small());
  ChunkHandle c = exporter.create_chunk(2 * kGran);
  DevicePtr va = exporter.reserve(2 * kGran);
  exporter.map(va, 2 * kGran, c, 0);
  auto* bytes = reinterpret_cast<unsigned char*>(va);
  std::memset(bytes, 0x11, 2 * kGran);

  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // the receiver: only async-signal-safe-ish work and _exit, no gtest assertions
    close(sockets[0]);
    int fd = receive_fd(sockets[1]);
    HostBackend receiver(small());
    ChunkHandle imported = receiver.import_chunk({fd}, 2 * kGran);
    close(fd);
    DevicePtr rva = receiver.reserve(2 * kGran);
    receiver.map(rva, 2 * kGran, imported, 0);
    auto* mine = reinterpret_cast<unsigned char*>(rva);
    bool saw = mine[0] == 0x11 && mine[2 * kGran - 1] == 0x11;
    std::memset(mine + kGran, 0x22, kGran);
    _exit(saw ? 0 : 1);
  }
  close(sockets[1]);
  std::vector<int> fds = exporter.export_chunk(c);
  ASSERT_EQ(fds.size(), 1u);
  send_fd(sockets[0], fds[0]);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the receiver did not see the exporter's bytes";
  EXPECT_EQ(bytes[0], 0x11);
  EXPECT_EQ(bytes[kGran], 0x22) << "the receiver's write is not seen by the exporter";
  close(sockets[0]);
  exporter.unmap(va, 2 * kGran);
  exporter.release_chunk(c);
  exporter.release_range(va, 2 * kGran);
}

TEST(HostBackend, ImportRejectsWhatIsNotAMemoryFileOfTheSize) {
  HostBackend b(small());
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  EXPECT_THROW(b.import_chunk({pipe_fds[0]}, kGran), BackendError);
  ChunkHandle c = b.create_chunk(kGran);
  std::vector<int> fds = b.export_chunk(c);
  EXPECT_THROW(b.import_chunk(fds, 2 * kGran), BackendError) << "a 1-granule memfd imported as 2";
  EXPECT_THROW(b.import_chunk({fds[0], fds[0]}, kGran), BackendError);
  EXPECT_EQ(b.used_bytes(), kGran);
  ChunkHandle imported = b.import_chunk(fds, kGran);
  EXPECT_EQ(b.used_bytes(), kGran) << "an imported chunk must take no capacity";
  b.release_chunk(imported);
  b.release_chunk(c);
  EXPECT_EQ(b.used_bytes(), 0u);
  for (int fd : {fds[0], pipe_fds[0], pipe_fds[1]}) close(fd);
}

TEST(HostBackend, SharedChunksAreNeverPunchedWhileAnotherProcessMayMapThem) {
  HostBackend b(small());
  ChunkHandle c = b.create_chunk(4 * kGran);
  DevicePtr va = b.reserve(4 * kGran), other = b.reserve(4 * kGran);
  b.map(va, 4 * kGran, c, 0);
  std::memset(reinterpret_cast<void*>(va), 0x5a, 4 * kGran);
  std::vector<int> fds = b.export_chunk(c);
  ChunkHandle imported = b.import_chunk(fds, 4 * kGran);  // as the receiving process would
  b.map(other, 2 * kGran, imported, 0);
  b.unmap(va, 4 * kGran);
  EXPECT_FALSE(b.release_chunk_part(c, 0, 2 * kGran)) << "the receiver still maps these pages";
  EXPECT_EQ(reinterpret_cast<unsigned char*>(other)[kGran], 0x5a) << "the receiver's bytes are intact";
  ChunkHandle own = b.create_chunk(2 * kGran);
  EXPECT_TRUE(b.release_chunk_part(own, 0, kGran)) << "a chunk never shared is punched as usual";
  b.unmap(other, 2 * kGran);
  for (ChunkHandle h : {imported, c, own}) b.release_chunk(h);
  b.release_range(va, 4 * kGran);
  b.release_range(other, 4 * kGran);
  close(fds[0]);
}

}  // namespace
}  // namespace gpumem
