// Host-specific checks of the host backend: what the kernel sees (page protections, file descriptors)
// and how syscall failures surface. The portable contract is in the conformance suite.
#include <dirent.h>
#include <sys/resource.h>
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

}  // namespace
}  // namespace gpumem
