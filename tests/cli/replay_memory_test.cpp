// `gpumem replay` under a cap on its address space (RLIMIT_AS, as `ulimit -v` sets): a trace streams, so
// millions of events with few blocks live replay in a few MiB; running out of host memory anywhere, at
// any cap, is one sentence and exit 3, never an abort or `std::bad_alloc`. Label "slow": sanitizer
// builds reserve terabytes of shadow memory and cannot run under such a cap.
#include <fcntl.h>
#include <signal.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/gpumem_child.hpp"
#include "gpumem/trace.hpp"

namespace {

namespace fs = std::filesystem;
using gpumem::testing::Outcome;
using gpumem::testing::slurp;
constexpr std::uint64_t MiB = 1 << 20;

class ReplayMemory : public gpumem::testing::ScratchDirTest {
 protected:
  ReplayMemory() : ScratchDirTest("gpumem_replay_memory_") {}

  // gpumem ARGS in a child process whose address space is capped at `limit` bytes.
  Outcome gpumem(const std::vector<std::string>& args, std::uint64_t limit) const { return run_gpumem(args, limit); }

  // A gzip trace of `allocs` allocations of 512 bytes; each is freed `window` allocations later
  // (never, with window 0). Addresses come back once free, as an allocator's do.
  std::string write_trace(const std::string& name, std::size_t allocs, std::size_t window) const {
    const std::string path = (dir_ / name).string();
    gzFile f = gzopen(path.c_str(), "wb1");
    gzbuffer(f, 1 << 20);
    std::string text = R"({"format": "gpumem-trace", "version": 1, "source": "replay_memory_test"})" "\n";
    auto address = [&](std::size_t i) { return 4096 * (window ? i % (2 * window) : i) + 4096; };
    char line[160];
    for (std::size_t i = 0; i < allocs; ++i) {
      text.append(line, std::snprintf(line, sizeof line, R"({"t": %zu, "op": "alloc", "addr": %zu, "size": 512, "stream": 0})" "\n", i,
                                       address(i)));
      if (window && i >= window)
        text.append(line, std::snprintf(line, sizeof line, R"({"t": %zu, "op": "free", "addr": %zu, "size": 512, "stream": 0})" "\n",
                                         i, address(i - window)));
      if (text.size() > (1 << 20)) {
        gzwrite(f, text.data(), unsigned(text.size()));
        text.clear();
      }
    }
    gzwrite(f, text.data(), unsigned(text.size()));
    gzclose(f);
    return path;
  }

};

// What a failure at any cap must look like: exit 3 and one sentence naming the cause.
void expect_out_of_host_memory(const Outcome& r, const std::string& context) {
  EXPECT_EQ(r.status, 3) << context << ": " << r.err;
  EXPECT_NE(r.err.find(": out of host memory while "), std::string::npos) << context << ": " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << context << ": " << r.err;
  EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << context << ": " << r.err;
}

constexpr std::uint64_t kCap = 40 * MiB;

TEST_F(ReplayMemory, MillionsOfEventsWithFewLiveBlocksReplayUnderASmallCap) {
  constexpr std::size_t kAllocs = 800'000, kWindow = 16;
  const std::string path = write_trace("long.jsonl.gz", kAllocs, kWindow);
  const std::size_t events = 2 * kAllocs - kWindow;
  // A reader that kept the events would need more than the cap for them alone.
  ASSERT_GT(events * sizeof(gpumem::trace::Event), kCap);

  Outcome r = gpumem({"replay", "--json", path}, kCap);
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["events"], events);
  EXPECT_EQ(j["peak_requested"], (kWindow + 1) * 512);  // the next alloc comes before the oldest free
  EXPECT_EQ(j["ooms"], 0);

  // --min-capacity replays it again for every probe: still within the cap.
  r = gpumem({"replay", "--json", "--min-capacity", "--page", "2MiB", path}, kCap);
  ASSERT_EQ(r.status, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["events"], events);
  EXPECT_EQ(j["min_capacity"], 2 * MiB);
}

TEST_F(ReplayMemory, TooManyLiveBlocksForTheCapIsOneSentenceAndExitThree) {
  const std::string path = write_trace("live.jsonl.gz", 1'000'000, 0);
  const Outcome r = gpumem({"replay", path}, kCap);
  expect_out_of_host_memory(r, "1,000,000 live blocks under 40 MiB");
  EXPECT_NE(r.err.find("gpumem replay: out of host memory while replaying " + path), std::string::npos) << r.err;
}

TEST_F(ReplayMemory, AnyCapGivesSuccessOrTheOneSentence) {
  const std::string path = write_trace("small.jsonl.gz", 20'000, 64);
  int sentences = 0, successes = 0;
  bool started = false;
  for (std::uint64_t cap = 2 * MiB; cap <= 32 * MiB; cap += MiB / 2) {
    const Outcome r = gpumem({"replay", path}, cap);
    // Below some cap the program never starts: exec's stack setup fails (SIGSEGV, before any cap that
    // started) or ld.so cannot map a library or its thread's TLS (127 with its own message, near any cap:
    // address-space layout is random). Neither is gpumem's to answer; a later SIGSEGV is.
    const bool loader = (r.status == 127 && (r.err.find("error while loading shared libraries") != std::string::npos ||
                                             r.err.find("cannot allocate TLS data structures") != std::string::npos)) ||
                        (!started && r.status == 128 + SIGSEGV && r.err.empty());
    if (loader) continue;
    started = true;
    const std::string context = "cap " + std::to_string(cap / 1024) + " KiB";
    if (r.status == 0) {
      ++successes;
      EXPECT_TRUE(r.err.empty()) << context << ": " << r.err;
      continue;
    }
    ++sentences;
    expect_out_of_host_memory(r, context);
  }
  EXPECT_GT(sentences, 0) << "no cap was small enough to run out of memory after the program started";
  EXPECT_GT(successes, 0) << "no cap up to 32 MiB was enough to replay 40,000 events";
}

}  // namespace
