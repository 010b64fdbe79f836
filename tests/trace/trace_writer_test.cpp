// TraceWriter: the lines a program's thread formats are compressed and written by the writer's own
// thread, in order; what read_trace() reads back is every event written, also across many buffers, a
// full disk is one clear error, and a forked child never touches its parent's file.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "gpumem/trace.hpp"
#include "gpumem/trace_writer.hpp"

namespace gpumem::trace {
namespace {

std::string temp_path(const char* suffix) {
  return std::string("/tmp/gpumem-trace-writer-test-") + std::to_string(getpid()) + suffix;
}

// alloc, free, free_completed of block i: valid for the reader (every free follows its alloc).
void write_block(TraceWriter& w, std::uint64_t i) {
  const std::uint64_t addr = 0x7f0000000000ull + i * 4096, size = 512 * (1 + i % 1000);
  for (Op op : {Op::alloc, Op::free, Op::free_completed}) {
    Event e;
    e.t = 10 * i + std::uint64_t(op);
    e.op = op;
    e.addr = addr;
    e.size = size;  // as the recorder writes them: a free names its block's size
    e.stream = i % 3;
    w.write(e);
  }
}

TEST(TraceWriter, EveryEventOfManyBuffersIsReadBackInOrder) {
  for (const char* suffix : {".jsonl.gz", ".jsonl"}) {
    const std::string path = temp_path(suffix);
    constexpr std::uint64_t kBlocks = 40000;  // ~10 MB of lines: several buffers for the compressor
    {
      TraceWriter w(path, "test", "simulated device");
      for (std::uint64_t i = 0; i < kBlocks; ++i) write_block(w, i);
      EXPECT_EQ(w.events_written(), 3 * kBlocks);
      w.close();
    }
    const Trace t = read_trace(path);
    EXPECT_EQ(t.device, "simulated device");
    ASSERT_EQ(t.events.size(), 3 * kBlocks) << suffix;
    for (std::uint64_t i = 0; i < kBlocks; ++i) {
      const Event& a = t.events[3 * i];
      ASSERT_EQ(a.op, Op::alloc) << i;
      ASSERT_EQ(a.t, 10 * i);
      ASSERT_EQ(a.addr, 0x7f0000000000ull + i * 4096);
      ASSERT_EQ(a.size, 512 * (1 + i % 1000));
      ASSERT_EQ(a.stream, i % 3);
      ASSERT_EQ(t.events[3 * i + 2].op, Op::free_completed);
    }
    std::remove(path.c_str());
  }
}

TEST(TraceWriter, AFullDiskIsOneClearError) {
  TraceWriter w("/dev/full", "test", "");  // opens; every write fails
  try {
    for (std::uint64_t i = 0; i < 40000; ++i) write_block(w, i);
    w.close();
    FAIL() << "no error on a full disk";
  } catch (const TraceError& e) {
    EXPECT_NE(std::string(e.what()).find("disk full"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(w.close());  // closed: nothing more to say
}

// Every process of a job inherits GPUMEM_TRACE: a second writer of one file interleaved lines into a trace
// nobody could read. Another process writes beside it, its pid in the name, and both files read back whole;
// a forked child does not inherit the lock (a DataLoader worker must not keep the parent's next trace out).
TEST(TraceWriter, AnotherProcessWritingTheFileWritesBesideIt) {
  const std::string path = temp_path(".shared.jsonl.gz");
  TraceWriter first(path, "test", "");
  for (std::uint64_t i = 0; i < 20000; ++i) write_block(first, i);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // a second process of the job, as a fresh one would start (exit codes say what it saw)
    close(fds[0]);
    int code = 0;
    try {
      TraceWriter second(path, "test", "");
      const std::string beside = second.path() + "\n";
      (void)!write(fds[1], beside.data(), beside.size());
      code = second.redirected() ? 0 : 1;
      for (std::uint64_t i = 0; i < 20000; ++i) write_block(second, i);
      second.close();
    } catch (const std::exception&) {
      code = 2;
    }
    _exit(code);
  }
  close(fds[1]);
  char buf[512] = {};
  const ssize_t n = read(fds[0], buf, sizeof buf - 1);
  close(fds[0]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the second process did not write beside the first";
  const std::string beside(buf, n > 0 ? std::size_t(n) - 1 : 0);
  EXPECT_EQ(beside, "/tmp/gpumem-trace-writer-test-" + std::to_string(getpid()) + "." + std::to_string(child) +
                        ".shared.jsonl.gz");
  first.close();
  EXPECT_EQ(read_trace(path).events.size(), 3u * 20000);
  EXPECT_EQ(read_trace(beside).events.size(), 3u * 20000);
  std::remove(beside.c_str());
  // Closed here: the file is free again, whatever a child of ours still holds open.
  TraceWriter again(path, "test", "");
  EXPECT_FALSE(again.redirected());
  again.close();
  std::remove(path.c_str());
}

TEST(TraceWriter, AForkedChildLeavesItsParentsFileAlone) {
  const std::string path = temp_path(".fork.jsonl.gz");
  TraceWriter w(path, "test", "");
  for (std::uint64_t i = 0; i < 20000; ++i) write_block(w, i);  // the compressor runs by now
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // writes and closes its copy, as a child that allocates and exits would
    int code = 0;
    try {
      for (std::uint64_t i = 0; i < 20000; ++i) write_block(w, 1000000 + i);
      code = 1;  // the buffer filled: it must have refused
    } catch (const TraceError&) {
    }
    w.close();
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child wrote its parent's trace";
  for (std::uint64_t i = 20000; i < 30000; ++i) write_block(w, i);
  w.close();
  const Trace t = read_trace(path);  // whole, and only the parent's events
  ASSERT_EQ(t.events.size(), 3u * 30000);
  EXPECT_EQ(t.events.back().addr, 0x7f0000000000ull + 29999ull * 4096);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpumem::trace
