// replay() and find_min_capacity() on small traces whose answers follow from the trace by hand.
#include <gtest/gtest.h>

#include <set>
#include <vector>

#include <string>

#include "gpumem/replay.hpp"

namespace gpumem::trace {
namespace {

constexpr std::uint64_t MiB = 1 << 20;

std::string trace_text(std::initializer_list<std::tuple<const char*, std::uint64_t, std::uint64_t>> events) {
  std::string out = R"({"format": "gpumem-trace", "version": 1})" "\n";
  std::uint64_t t = 0;
  for (const auto& [op, addr, size] : events) {
    out += "{\"t\": " + std::to_string(++t) + ", \"op\": \"" + op + "\", \"addr\": " + std::to_string(addr) +
           ", \"size\": " + std::to_string(size) + ", \"stream\": 0}\n";
  }
  return out;
}

TEST(Replay, ReleasesAtFreeCompletedWhenTheTraceHasThem) {
  // B is allocated after A's free but before A's free_completed: both must be live at once.
  const Trace with = parse_trace(trace_text({{"alloc", 1, 10 * MiB}, {"free", 1, 10 * MiB}, {"alloc", 2, 10 * MiB},
                                             {"free_completed", 1, 10 * MiB}}),
                                 "with");
  const Trace without = parse_trace(trace_text({{"alloc", 1, 10 * MiB}, {"free", 1, 10 * MiB}, {"alloc", 2, 10 * MiB}}), "without");
  EXPECT_EQ(with.summary.peak_requested, 20 * MiB);
  EXPECT_EQ(without.summary.peak_requested, 10 * MiB);

  ReplayOptions small;
  small.page = 2 * MiB;  // hand-computed with 2 MiB pages
  small.capacity = 10 * MiB;
  const ReplayResult a = replay(with, small);
  EXPECT_EQ(a.ooms, 1u);
  ASSERT_TRUE(a.first_oom.has_value());
  EXPECT_EQ(a.first_oom->event_index, 2u);
  EXPECT_EQ(a.first_oom->line, 4u);
  EXPECT_EQ(a.first_oom->requested, 10 * MiB);
  EXPECT_EQ(a.first_oom->allocated, 10 * MiB);
  EXPECT_EQ(a.first_oom->capacity, 10 * MiB);

  const ReplayResult b = replay(without, small);
  EXPECT_EQ(b.ooms, 0u);
  EXPECT_EQ(b.peak_reserved, 10 * MiB);
  EXPECT_DOUBLE_EQ(b.ratio, 1.0);
  EXPECT_EQ(b.events, 3u);
  EXPECT_EQ(b.operations, 3u);  // allocate, deallocate, allocate; the last block stays live
  EXPECT_GT(b.calls.device_calls(), 0u);
}

TEST(Replay, ContinuesAfterAnOomAndCountsThem) {
  const Trace t = parse_trace(trace_text({{"alloc", 1, 8 * MiB}, {"alloc", 2, 8 * MiB}, {"free", 2, 8 * MiB},
                                          {"alloc", 3, 8 * MiB}, {"free", 1, 8 * MiB}, {"alloc", 4, 4 * MiB}}),
                              "t");
  ReplayOptions options;
  options.page = 2 * MiB;
  options.capacity = 12 * MiB;
  const ReplayResult r = replay(t, options);
  EXPECT_EQ(r.ooms, 2u);  // blocks 2 and 3 do not fit beside block 1; block 4 fits after 1 is freed
  EXPECT_EQ(r.first_oom->event_index, 1u);
  options.stop_at_first_oom = true;
  EXPECT_EQ(replay(t, options).ooms, 1u);
}

TEST(MinCapacity, IsThePhysicalLimitRoundedToPages) {
  // Live bytes peak at 10 MiB (A+B, then C+D); C needs A's and B's freed pages together.
  const Trace t = parse_trace(trace_text({{"alloc", 1, 4 * MiB}, {"alloc", 2, 6 * MiB}, {"free", 1, 4 * MiB}, {"free", 2, 6 * MiB},
                                          {"alloc", 3, 8 * MiB}, {"alloc", 4, 2 * MiB}, {"free", 3, 8 * MiB}, {"free", 4, 2 * MiB}}),
                              "t");
  std::size_t probes = 0;
  const MinCapacityResult m = find_min_capacity(t, [&](const CapacityProbe& p) {
    ++probes;
    EXPECT_EQ(p.number, probes);
    EXPECT_EQ(p.capacity % kCapacityStep, 0u);
  }, 2 * MiB);
  EXPECT_EQ(m.capacity, 10 * MiB);
  EXPECT_DOUBLE_EQ(m.ratio, 1.0);
  EXPECT_EQ(m.probes, probes);
  EXPECT_GE(probes, 1u);

  // One block of 3 MiB + 1 byte needs two 2 MiB pages: 4 MiB, ratio 4/3.
  const Trace odd = parse_trace(trace_text({{"alloc", 1, 3 * MiB + 1}}), "odd");
  const MinCapacityResult o = find_min_capacity(odd, {}, 2 * MiB);
  EXPECT_EQ(o.capacity, 4 * MiB);
  EXPECT_NEAR(o.ratio, 4.0 / 3.0, 1e-6);
}

// More memory can hurt (gpt2_sample ran on 414 and 420 MiB devices, not on 418): the sizes between the
// minimum and the top are probed too, and a failure among them is reported with the size from which
// every probed one runs.
TEST(MinCapacity, SizesAboveTheMinimumThatFailAreNamed) {
  constexpr std::uint64_t kLive = 400 * MiB;
  ReplayResult unconstrained;
  unconstrained.peak_reserved = 440 * MiB;  // the top: 440 MiB
  auto runs_on = [](std::set<std::uint64_t> failing_mib) {
    return [failing_mib](const ReplayOptions& o) {
      ReplayResult r;
      const std::uint64_t c = o.capacity / MiB;
      r.ooms = c < 410 || failing_mib.count(c) ? 1 : 0;
      return r;
    };
  };
  std::vector<std::uint64_t> probed;
  const MinCapacityResult m = search_min_capacity(unconstrained, kLive, runs_on({422, 434}),
                                                  [&](const CapacityProbe& p) { probed.push_back(p.capacity / MiB); });
  EXPECT_EQ(m.capacity, 410 * MiB);
  // The top, the bisection (418, 408, 412, 410), then 14 sizes between 410 and 440, every second one
  // (at most kAboveProbes): 414, 418, 422 (fails), 426, 430, 434 (fails), 438.
  EXPECT_EQ(probed, (std::vector<std::uint64_t>{440, 418, 408, 412, 410, 414, 418, 422, 426, 430, 434, 438}));
  EXPECT_EQ(m.probes, probed.size());
  EXPECT_EQ(m.failed_above, (std::vector<std::uint64_t>{422 * MiB, 434 * MiB}));
  EXPECT_EQ(m.every_above, 436 * MiB);
  EXPECT_DOUBLE_EQ(m.every_above_ratio, 436.0 / 400.0);

  // Nothing fails above the minimum: every_above is the minimum, nothing is named.
  const MinCapacityResult clean = search_min_capacity(unconstrained, kLive, runs_on({}));
  EXPECT_EQ(clean.capacity, 410 * MiB);
  EXPECT_EQ(clean.every_above, 410 * MiB);
  EXPECT_TRUE(clean.failed_above.empty());

  // The same for a limit (the replay is asked with a limit, not a capacity).
  const MinCapacityResult limit = search_min_capacity(unconstrained, kLive, [](const ReplayOptions& o) {
    ReplayResult r;
    r.ooms = o.capacity != kDefaultReplayCapacity || o.limit / MiB < 412 || o.limit / MiB == 428 ? 1 : 0;
    return r;
  }, {}, kDefaultReplayPage, Searched::limit);
  EXPECT_EQ(limit.capacity, 412 * MiB);
  EXPECT_EQ(limit.failed_above, std::vector<std::uint64_t>{428 * MiB});
  EXPECT_EQ(limit.every_above, 430 * MiB);
}

// The allocation trace gpumem itself recorded (GPUMEM_TRACE) while training the transformer LM of
// scripts/gpu-check.sh on an H200: with 2 MiB pages the engine reserved 1.016x its peak live bytes there
// (the replay reproduced the GPU's figure exactly), with the default 16 MiB pages 1.0073x.
TEST(Replay, RecordedTransformerStaysWithinOnePercent) {
  const Trace t = read_trace(GPUMEM_SOURCE_DIR "/tests/data/lm_h200_gpumem.jsonl.gz");
  const ReplayResult r = replay(t);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_LE(r.ratio, 1.01);
  EXPECT_GE(r.ratio, 1.0);
}

// Streaming the file gives the figures of the trace held in memory, and --min-capacity's answer is the
// same whether its probes replay the cached steps or stream the file again (no cache).
TEST(Replay, StreamedFileGivesTheFiguresOfTheTraceInMemory) {
  const std::string path = GPUMEM_SOURCE_DIR "/tests/data/lm_h200_gpumem.jsonl.gz";
  const Trace t = read_trace(path);
  ReplayOptions options;
  options.capacity = 8ull << 30;  // OOMs, so the first one's event and line are compared too
  const ReplayResult a = replay(t, options);
  TraceInfo info;
  const ReplayResult b = replay(path, info, options);
  EXPECT_EQ(info.summary.events, t.events.size());
  EXPECT_EQ(info.summary.peak_requested, t.summary.peak_requested);
  EXPECT_EQ(info.summary.peak_live_blocks, t.summary.peak_live_blocks);
  EXPECT_EQ(b.events, a.events);
  EXPECT_EQ(b.operations, a.operations);
  EXPECT_EQ(b.peak_reserved, a.peak_reserved);
  EXPECT_EQ(b.calls.device_calls(), a.calls.device_calls());
  EXPECT_EQ(b.ooms, a.ooms);
  ASSERT_TRUE(a.first_oom && b.first_oom);
  EXPECT_EQ(b.first_oom->event_index, a.first_oom->event_index);
  EXPECT_EQ(b.first_oom->line, a.first_oom->line);
  EXPECT_GT(b.read_seconds, 0.0);

  const MinCapacityResult in_memory = find_min_capacity(t, {}, 2 * MiB);
  TraceInfo cached_info, streamed_info;
  std::size_t streamed_probes = 0;
  const MinCapacityResult cached = find_min_capacity(path, cached_info, {}, 2 * MiB);
  const MinCapacityResult streamed =
      find_min_capacity(path, streamed_info, [&](const CapacityProbe&) { ++streamed_probes; }, 2 * MiB, /*cache_bytes=*/0);
  EXPECT_EQ(cached.capacity, in_memory.capacity);
  EXPECT_EQ(streamed.capacity, in_memory.capacity);
  EXPECT_EQ(cached.probes, in_memory.probes);
  EXPECT_EQ(streamed.probes, in_memory.probes);
  EXPECT_EQ(streamed_probes, in_memory.probes);
  EXPECT_EQ(streamed.unconstrained.peak_reserved, in_memory.unconstrained.peak_reserved);
}

}  // namespace
}  // namespace gpumem::trace
