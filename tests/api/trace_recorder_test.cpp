// Recording an allocation trace through the C ABI (gpumem_trace_start / _stop) and reading it back with
// the trace reader: what `GPUMEM_TRACE=FILE gpumem run ...` produces for `gpumem replay`.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpumem/gpumem.h"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"
#include "gpumem/replay.hpp"
#include "gpumem/trace.hpp"

namespace {

std::string temp_path(const char* suffix) {
  return std::string("/tmp/gpumem-trace-test-") + std::to_string(getpid()) + suffix;
}

class TraceRecorder : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    gpumem::set_backend_factory([](int) {
      gpumem::HostBackendOptions o;
      o.capacity = std::size_t(64) << 20;
      return std::make_shared<gpumem::HostBackend>(o);
    });
  }
};

TEST_F(TraceRecorder, RecordsAllocationsAndFreesInOrder) {
  const std::string path = temp_path(".jsonl.gz");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(gpumem_allocate(1000, 0, reinterpret_cast<void*>(7), &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(3 << 20, 0, nullptr, &b), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(a, 0, reinterpret_cast<void*>(7)), GPUMEM_OK);
  void* none = nullptr;
  ASSERT_EQ(gpumem_allocate(0, 0, nullptr, &none), GPUMEM_OK);  // no memory, not recorded
  EXPECT_EQ(none, nullptr);
  ASSERT_EQ(gpumem_allocate(512, 0, nullptr, &c), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(b, 0, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_trace_stop(), 7);
  ASSERT_EQ(gpumem_deallocate(c, 0, nullptr), GPUMEM_OK);  // after the stop: not recorded

  gpumem::trace::Trace t = gpumem::trace::read_trace(path);
  ASSERT_EQ(t.events.size(), 7u);
  using gpumem::trace::Op;
  // Each free is followed by its free_completed: no other stream used those blocks.
  const Op ops[] = {Op::alloc, Op::alloc, Op::free, Op::free_completed, Op::alloc, Op::free, Op::free_completed};
  const std::uint64_t sizes[] = {1000, 3 << 20, 1000, 1000, 512, 3 << 20, 3 << 20};
  for (std::size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(t.events[i].op, ops[i]) << i;
    EXPECT_EQ(t.events[i].size, sizes[i]) << i;
  }
  EXPECT_EQ(t.events[0].stream, 7u);
  EXPECT_EQ(t.events[0].addr, reinterpret_cast<std::uintptr_t>(a));
  EXPECT_EQ(t.summary.peak_requested, std::uint64_t(1000 + (3 << 20)));
  EXPECT_EQ(t.device, "host memory (test device)");  // the recording allocator's device names it
  EXPECT_EQ(t.version, 2);
  EXPECT_FALSE(t.truncated);  // finished: its end record is there
  std::remove(path.c_str());
}

// Issue 12 item 4: a free is recorded while the block is still owned, so another thread's allocation of
// the same address always comes after it, and no free is lost.
TEST_F(TraceRecorder, ManyThreadsGiveATraceThatReplaysWithEveryEvent) {
  const std::string path = temp_path("-threads.jsonl.gz");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  constexpr int kThreads = 8, kOps = 3000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([t] {
      // All on one stream: addresses are handed from one thread to another all the time.
      std::vector<void*> live;
      for (int i = 0; i < kOps; ++i) {
        void* p = nullptr;
        if (gpumem_allocate(std::size_t(512 * (1 + (i + t) % 7)), 0, nullptr, &p) == GPUMEM_OK) live.push_back(p);
        if (live.size() > 3 || i % 5 == 0) {
          for (void* q : live) gpumem_deallocate(q, 0, nullptr);
          live.clear();
        }
      }
      for (void* q : live) gpumem_deallocate(q, 0, nullptr);
    });
  for (auto& th : threads) th.join();
  const long written = gpumem_trace_stop();
  gpumem::trace::Trace t = gpumem::trace::read_trace(path);  // throws on an alloc of a live address
  EXPECT_EQ(long(t.events.size()), written);
  EXPECT_EQ(t.summary.allocs, std::size_t(kThreads * kOps));
  EXPECT_EQ(t.summary.frees, std::size_t(kThreads * kOps));
  gpumem::trace::ReplayResult r = gpumem::trace::replay(t);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_EQ(r.invalid_frees, 0u);
  std::remove(path.c_str());
}

// A block freed on another stream than its own (record_stream) becomes reusable only once that stream's
// work is done: the trace says when, so a replay holds it that long too (a 3-stream GPU fuzz replayed at
// 1.009x its peak live bytes while the run itself reserved 1.14x, before free_completed was recorded).
TEST_F(TraceRecorder, AFreeOnAnotherStreamIsCompletedLater) {
  const std::string path = temp_path("-streams.jsonl.gz");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(gpumem_allocate(4 << 20, 0, nullptr, &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(a, 0, reinterpret_cast<void*>(9)), GPUMEM_OK);  // used on stream 9 until now
  ASSERT_EQ(gpumem_allocate(4 << 20, 0, nullptr, &b), GPUMEM_OK);  // finds stream 9's work done first
  ASSERT_EQ(gpumem_deallocate(b, 0, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_trace_stop(), 6);

  gpumem::trace::Trace t = gpumem::trace::read_trace(path);
  using gpumem::trace::Op;
  const Op ops[] = {Op::alloc, Op::free, Op::free_completed, Op::alloc, Op::free, Op::free_completed};
  ASSERT_EQ(t.events.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) EXPECT_EQ(t.events[i].op, ops[i]) << i;
  EXPECT_EQ(t.events[2].size, std::uint64_t(4 << 20));
  EXPECT_TRUE(t.summary.has_free_completed);
  EXPECT_EQ(t.summary.peak_requested, std::uint64_t(4 << 20));
  std::remove(path.c_str());
}

TEST_F(TraceRecorder, CppUsersOfTheDefaultAllocatorsAreTraced) {
  const std::string path = temp_path("-cpp.jsonl");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  gpumem::Allocator& a = gpumem::default_allocator(0);
  void* p = a.allocate(777, 0);
  a.deallocate(p, 0);
  EXPECT_EQ(gpumem_trace_stop(), 3);  // alloc, free, free_completed
  gpumem::trace::Trace t = gpumem::trace::read_trace(path);
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].size, 777u);
  EXPECT_EQ(t.events[1].op, gpumem::trace::Op::free);
  std::remove(path.c_str());
}

TEST_F(TraceRecorder, ATraceWithoutEventsStillHasItsHeader) {
  const std::string path = temp_path("-empty.jsonl");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  EXPECT_EQ(gpumem_trace_stop(), 0);
  std::ifstream in(path);  // the header is written at the stop (the reader refuses a trace of no events)
  std::string header;
  std::getline(in, header);
  EXPECT_NE(header.find(R"("format":"gpumem-trace")"), std::string::npos) << header;
  EXPECT_NE(header.find(R"("source":"gpumem recorder")"), std::string::npos) << header;
  std::remove(path.c_str());
}

TEST_F(TraceRecorder, AFileThatCannotBeCreatedIsAClearError) {
  EXPECT_EQ(gpumem_trace_start("/nonexistent-dir/trace.jsonl"), GPUMEM_E_INVALID);
  EXPECT_NE(std::string(gpumem_last_error()).find("cannot create the trace file"), std::string::npos)
      << gpumem_last_error();
  EXPECT_EQ(gpumem_trace_stop(), 0);
}

TEST_F(TraceRecorder, ThreadsRecordEveryEventInTheOrderItTookEffect) {
  // Threads on one stream free and allocate the same sizes, so addresses are reused at once: a free
  // written after another thread's allocation of its address made the trace unreadable.
  const std::string path = temp_path("-threads.jsonl");
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  constexpr int kThreads = 8, kRounds = 2000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kRounds; ++i) {
        void* p = nullptr;
        ASSERT_EQ(gpumem_allocate(512 + (i % 3) * 512, 6, nullptr, &p), GPUMEM_OK);
        ASSERT_EQ(gpumem_deallocate(p, 6, nullptr), GPUMEM_OK);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(gpumem_trace_stop(), 3 * kThreads * kRounds);  // alloc, free, free_completed each
  gpumem::trace::Trace t;
  ASSERT_NO_THROW(t = gpumem::trace::read_trace(path));
  EXPECT_EQ(t.summary.allocs, std::size_t(kThreads * kRounds));
  EXPECT_EQ(t.summary.frees, std::size_t(kThreads * kRounds));
  EXPECT_EQ(t.summary.free_completeds, std::size_t(kThreads * kRounds));
  std::remove(path.c_str());
}

// A trace holds one device: the events of two devices in one file replayed as one device (host backend:
// 1 GiB on each replayed as 2 GiB; sim backend: the same addresses on both, an unreadable trace). Each
// device after the first writes its own file beside the one named.
TEST_F(TraceRecorder, EachDeviceWritesItsOwnTrace) {
  const std::string path = temp_path("-devices.jsonl.gz");
  const std::string beside = temp_path("-devices.dev1.jsonl.gz");
  std::remove(beside.c_str());
  ASSERT_EQ(gpumem_trace_start(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(gpumem_allocate(1 << 20, 0, nullptr, &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(3 << 20, 1, nullptr, &b), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(1000, 0, nullptr, &c), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(b, 1, nullptr), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(a, 0, nullptr), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(c, 0, nullptr), GPUMEM_OK);
  EXPECT_EQ(gpumem_trace_stop(), 9);
  const gpumem::trace::Trace first = gpumem::trace::read_trace(path);
  EXPECT_EQ(first.events.size(), 6u);
  EXPECT_EQ(first.summary.peak_requested, std::uint64_t((1 << 20) + 1000));
  EXPECT_FALSE(first.truncated);
  gpumem::trace::Trace second;
  ASSERT_NO_THROW(second = gpumem::trace::read_trace(beside));
  EXPECT_EQ(second.events.size(), 3u);
  EXPECT_EQ(second.summary.peak_requested, std::uint64_t(3 << 20));
  EXPECT_EQ(second.device, "host memory (test device)");
  EXPECT_FALSE(second.truncated);
  std::remove(path.c_str());
  std::remove(beside.c_str());
}

// The lines of a trace file as far as they can be decoded: a process killed leaves a gzip file without its
// trailer, which gzread decodes up to the cut before it reports the error.
std::vector<std::string> decodable_lines(const std::string& path) {
  std::string text;
  if (gzFile f = gzopen(path.c_str(), "rb")) {
    char buf[65536];
    int n;
    while ((n = gzread(f, buf, sizeof buf)) > 0) text.append(buf, std::size_t(n));
    gzclose(f);
  }
  std::vector<std::string> lines;
  for (std::size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    lines.push_back(text.substr(start, nl - start));
  return lines;
}

// A process killed by SIGTERM or SIGKILL, crashed, or ended by _exit runs no atexit: its trace had nothing
// in it (a 1 MiB buffer never filled), and a .gz one could not even be decoded. What it recorded reaches
// the file within about a second.
TEST_F(TraceRecorder, AProcessKilledLeavesWhatItRecordedASecondBefore) {
  struct Case {
    const char* ending;
    int how;  // the signal that ends the process, 0: _exit
    std::string path;
    pid_t pid;
  };
  std::vector<Case> cases = {{".killed.jsonl.gz", SIGKILL, "", 0},
                             {".termed.jsonl", SIGTERM, "", 0},
                             {".exited.jsonl.gz", 0, "", 0}};
  for (Case& c : cases) {  // all at once: each waits out the flush
    c.path = temp_path(c.ending);
    std::remove(c.path.c_str());
    c.pid = fork();
    ASSERT_GE(c.pid, 0);
    if (c.pid == 0) {
      if (gpumem_trace_start(c.path.c_str()) != GPUMEM_OK) _exit(10);
      for (int i = 0; i < 100; ++i) {
        void* p = nullptr;
        if (gpumem_allocate(4096 + i, 0, nullptr, &p) != GPUMEM_OK) _exit(11);
        gpumem_deallocate(p, 0, nullptr);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      if (c.how) raise(c.how);
      _exit(0);
    }
  }
  for (const Case& c : cases) {
    int status = 0;
    ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
    ASSERT_TRUE(c.how ? WIFSIGNALED(status) : WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    const std::vector<std::string> lines = decodable_lines(c.path);
    ASSERT_EQ(lines.size(), 301u) << c.ending << " signal " << c.how << ": the header and 300 events";
    EXPECT_NE(lines[0].find("gpumem-trace"), std::string::npos) << lines[0];
    EXPECT_NE(lines[300].find("free_completed"), std::string::npos) << lines[300];
    const gpumem::trace::Trace t = gpumem::trace::read_trace(c.path);  // replayable: it says it ends early
    EXPECT_EQ(t.events.size(), 300u);
    EXPECT_TRUE(t.truncated);
    std::remove(c.path.c_str());
  }
}

}  // namespace
