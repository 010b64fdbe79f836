// The backend conformance suite (see conformance.hpp): what backend.hpp's contract promises, checked for
// every backend instantiated against it.
#include "backends/conformance.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include <unistd.h>

namespace gpumem::conformance {

std::shared_ptr<Backend> BackendConformance::make(const BackendParams& params) {
  try {
    auto backend = GetParam().factory(params);
    if (!backend) throw BackendUnavailableError("factory returned no backend");
    return backend;
  } catch (const BackendUnavailableError& e) {
    unavailable_ = GetParam().name + " unavailable: " + e.what();
    return nullptr;
  }
}

void BackendConformance::write(Backend& b, DevicePtr dst, const void* src, std::size_t bytes) {
  if (GetParam().copy_in)
    GetParam().copy_in(b, dst, src, bytes);
  else
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
}

void BackendConformance::expect_live_chunks(const Backend& b, std::size_t n) {
  if (GetParam().live_chunks) {
    EXPECT_EQ(GetParam().live_chunks(b), n) << "live chunks";
  }
}

void BackendConformance::expect_live_mappings(const Backend& b, std::size_t n) {
  if (GetParam().live_mappings) {
    EXPECT_EQ(GetParam().live_mappings(b), n) << "live mappings";
  }
}

void BackendConformance::read(Backend& b, void* dst, DevicePtr src, std::size_t bytes) {
  if (GetParam().copy_out)
    GetParam().copy_out(b, dst, src, bytes);
  else
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
}

namespace {

// A pattern that differs for every (seed, offset), so a wrong page or offset shows.
std::vector<std::uint8_t> pattern(std::size_t bytes, std::uint32_t seed) {
  std::vector<std::uint8_t> v(bytes);
  std::uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b = std::uint8_t(x);
  }
  return v;
}

}  // namespace

TEST_P(BackendConformance, DescribesItself) {
  MAKE_OR_SKIP(b, BackendParams{});
  EXPECT_NE(std::strlen(b->name()), 0u);
  EXPECT_FALSE(b->device_name().empty());  // what traces and reports name the device by
  const std::size_t g = b->granularity();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u) << "granularity must be a power of two";
  MemInfo info = b->mem_info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);
}

TEST_P(BackendConformance, ReservedRangesAreAlignedAndDisjoint) {
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  DevicePtr r1 = b->reserve(4 * g);
  DevicePtr r2 = b->reserve(g);
  EXPECT_NE(r1, 0u);
  EXPECT_EQ(r1 % g, 0u);
  EXPECT_EQ(r2 % g, 0u);
  EXPECT_TRUE(r1 + 4 * g <= r2 || r2 + g <= r1) << "reserved ranges overlap";
  b->release_range(r1, 4 * g);
  b->release_range(r2, g);
}

TEST_P(BackendConformance, UnalignedArgumentsAreRejected) {
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  EXPECT_THROW(b->reserve(0), BackendError);
  EXPECT_THROW(b->reserve(g + 1), BackendError);
  EXPECT_THROW(b->create_chunk(0), BackendError);
  EXPECT_THROW(b->create_chunk(g / 2), BackendError);
  EXPECT_THROW(b->create_chunk(g + 512), BackendError);

  DevicePtr va = b->reserve(4 * g);
  ChunkHandle c = b->create_chunk(2 * g);
  const std::size_t mappings = GetParam().live_mappings ? GetParam().live_mappings(*b) : 0;
  EXPECT_THROW(b->map(va + g / 2, g, c, 0), BackendError) << "unaligned address";
  EXPECT_THROW(b->map(va, g / 2, c, 0), BackendError) << "unaligned size";
  EXPECT_THROW(b->map(va, 0, c, 0), BackendError) << "zero size";
  EXPECT_THROW(b->map(va, g, c, g / 2), BackendError) << "unaligned offset";
  EXPECT_THROW(b->map(va, 2 * g, c, g), BackendError) << "past the chunk's end";
  EXPECT_THROW(b->map(va, 3 * g, c, 0), BackendError) << "larger than the chunk";
  EXPECT_THROW(b->map(va, g, c + 1000, 0), BackendError) << "unknown chunk";
  expect_live_mappings(*b, mappings);  // a failed map leaves no mapping

  // The backend is still fully usable after the rejections.
  b->map(va, 2 * g, c, 0);
  EXPECT_THROW(b->map(va, g, c, 0), BackendError) << "address already mapped";
  b->unmap(va, 2 * g);
  b->release_chunk(c);
  b->release_range(va, 4 * g);
  expect_live_chunks(*b, 0u);
  expect_live_mappings(*b, 0u);
}

TEST_P(BackendConformance, ChunkLifecycleAccountsMemory) {
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  const std::size_t free0 = b->mem_info().free;
  DevicePtr va = b->reserve(8 * g);
  ChunkHandle c1 = b->create_chunk(2 * g);
  ChunkHandle c2 = b->create_chunk(g);
  EXPECT_NE(c1, c2);
  if (GetParam().honors_capacity) {
    EXPECT_EQ(b->mem_info().free, free0 - 3 * g);
  }
  expect_live_chunks(*b, 2u);

  b->map(va, 2 * g, c1, 0);
  b->map(va + 2 * g, g, c2, 0);  // adjacent mappings of different chunks
  expect_live_mappings(*b, 2u);
  b->unmap(va, 2 * g);
  b->unmap(va + 2 * g, g);
  expect_live_mappings(*b, 0u);

  // Unmapping keeps the range reserved: the same addresses take a mapping again.
  b->map(va + 2 * g, g, c1, g);
  b->unmap(va + 2 * g, g);

  b->release_chunk(c1);
  b->release_chunk(c2);
  b->release_range(va, 8 * g);
  if (GetParam().honors_capacity) {
    EXPECT_EQ(b->mem_info().free, free0);
  }
  expect_live_chunks(*b, 0u);
}

TEST_P(BackendConformance, SamePhysicalBytesThroughTwoMappings) {
  REQUIRE_REAL_MEMORY();
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  DevicePtr va1 = b->reserve(2 * g), va2 = b->reserve(2 * g);
  ChunkHandle c = b->create_chunk(2 * g);
  b->map(va1, 2 * g, c, 0);
  b->map(va2, 2 * g, c, 0);

  auto p1 = pattern(2 * g, 1);
  write(*b, va1, p1.data(), p1.size());
  std::vector<std::uint8_t> got(2 * g);
  read(*b, got.data(), va2, got.size());
  EXPECT_TRUE(got == p1) << "a write through one mapping is not seen through the other";

  auto p2 = pattern(g, 2);
  write(*b, va2 + g, p2.data(), p2.size());
  std::vector<std::uint8_t> half(g);
  read(*b, half.data(), va1 + g, g);
  EXPECT_TRUE(half == p2);

  b->unmap(va1, 2 * g);
  b->unmap(va2, 2 * g);
  b->release_chunk(c);
  b->release_range(va1, 2 * g);
  b->release_range(va2, 2 * g);
}

// CUDA IPC's building block: a chunk exported and imported (here into a second backend of the same kind,
// as the receiving process would) is the same memory, and outlives the exporter's release of its chunk.
TEST_P(BackendConformance, ExportedChunkImportsAsTheSameMemory) {
  REQUIRE_REAL_MEMORY();
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  if (!b->supports_sharing()) {
    EXPECT_THROW(b->export_chunk(0), BackendError);
    GTEST_SKIP() << GetParam().name << " cannot share memory with other processes";
  }
  MAKE_OR_SKIP(receiver, BackendParams{});
  const std::size_t g = b->granularity();
  ChunkHandle c = b->create_chunk(2 * g);
  DevicePtr va = b->reserve(2 * g);
  b->map(va, 2 * g, c, 0);
  std::vector<int> fds = b->export_chunk(c);
  ASSERT_FALSE(fds.empty());
  EXPECT_THROW(receiver->import_chunk({}, 2 * g), BackendError);

  ChunkHandle imported = receiver->import_chunk(fds, 2 * g);
  for (int fd : fds) close(fd);  // the import holds its own reference
  DevicePtr rva = receiver->reserve(2 * g);
  receiver->map(rva, 2 * g, imported, 0);
  auto p1 = pattern(2 * g, 3);
  write(*b, va, p1.data(), p1.size());
  std::vector<std::uint8_t> got(2 * g);
  read(*receiver, got.data(), rva, got.size());
  EXPECT_TRUE(got == p1) << "the importer does not see the exporter's bytes";

  b->unmap(va, 2 * g);  // the exporter lets go first: the importer's mapping keeps the memory
  b->release_chunk(c);
  b->release_range(va, 2 * g);
  auto p2 = pattern(g, 4);
  write(*receiver, rva + g, p2.data(), p2.size());
  std::vector<std::uint8_t> half(g);
  read(*receiver, half.data(), rva + g, g);
  EXPECT_TRUE(half == p2);
  receiver->unmap(rva, 2 * g);
  receiver->release_chunk(imported);
  receiver->release_range(rva, 2 * g);
  expect_live_chunks(*receiver, 0u);
}

TEST_P(BackendConformance, OffsetsSelectTheRightPages) {
  REQUIRE_REAL_MEMORY();
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  DevicePtr whole = b->reserve(4 * g), parts = b->reserve(4 * g);
  ChunkHandle c = b->create_chunk(4 * g);
  b->map(whole, 4 * g, c, 0);
  auto p = pattern(4 * g, 3);
  write(*b, whole, p.data(), p.size());

  // Map the chunk's pages 3, 1 into `parts` in swapped order and read them back there.
  b->map(parts, g, c, 3 * g);
  b->map(parts + g, g, c, g);
  std::vector<std::uint8_t> got(g);
  read(*b, got.data(), parts, g);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), p.begin() + 3 * g)) << "offset 3g mapped the wrong page";
  read(*b, got.data(), parts + g, g);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), p.begin() + g)) << "offset g mapped the wrong page";

  // The data lives in the chunk, not the mapping: it survives unmapping and mapping elsewhere.
  b->unmap(whole, 4 * g);
  b->map(whole + 2 * g, g, c, 0);
  read(*b, got.data(), whole + 2 * g, g);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), p.begin()));

  b->unmap(whole + 2 * g, g);
  b->unmap(parts, g);
  b->unmap(parts + g, g);
  b->release_chunk(c);
  b->release_range(whole, 4 * g);
  b->release_range(parts, 4 * g);
}

TEST_P(BackendConformance, CapacityExhaustionThrowsOutOfMemoryWithNoPartialState) {
  if (!GetParam().honors_capacity) GTEST_SKIP() << GetParam().name << " cannot cap its capacity";
  BackendParams params;
  params.capacity = 8 * params.granularity;
  MAKE_OR_SKIP(b, params);
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  const std::size_t total = b->mem_info().total;
  ASSERT_EQ(total % g, 0u);
  const std::size_t n = total / g;
  if (n > 1024) GTEST_SKIP() << "capacity of " << n << " granules is too large to exhaust here";

  EXPECT_THROW(b->create_chunk(total + g), OutOfMemoryError);
  EXPECT_EQ(b->mem_info().free, total) << "a failed create took memory";
  std::vector<ChunkHandle> chunks;
  for (std::size_t i = 0; i < n; ++i) chunks.push_back(b->create_chunk(g));
  EXPECT_EQ(b->mem_info().free, 0u);
  EXPECT_THROW(b->create_chunk(g), OutOfMemoryError);
  EXPECT_THROW(b->allocate(1), OutOfMemoryError);
  expect_live_chunks(*b, n);

  b->release_chunk(chunks.back());
  chunks.pop_back();
  EXPECT_THROW(b->create_chunk(2 * g), OutOfMemoryError);
  EXPECT_EQ(b->mem_info().free, g);
  chunks.push_back(b->create_chunk(g));  // exactly what is left still fits
  for (ChunkHandle c : chunks) b->release_chunk(c);
  EXPECT_EQ(b->mem_info().free, total);
  expect_live_chunks(*b, 0u);
}

TEST_P(BackendConformance, PlainAllocateAndFree) {
  MAKE_OR_SKIP(b, BackendParams{});
  const std::size_t g = b->granularity();
  const std::size_t free0 = b->mem_info().free;
  DevicePtr a = b->allocate(1);
  DevicePtr c = b->allocate(3 * g + 1);
  ASSERT_NE(a, 0u);
  ASSERT_NE(c, 0u);
  EXPECT_TRUE(a + 1 <= c || c + 3 * g + 1 <= a) << "plain allocations overlap";
  if (GetParam().honors_capacity) {
    EXPECT_LE(b->mem_info().free, free0 - (3 * g + 2));
  }
  if (GetParam().has_real_memory) {
    auto p = pattern(3 * g + 1, 4);
    write(*b, c, p.data(), p.size());
    std::vector<std::uint8_t> got(p.size());
    read(*b, got.data(), c, got.size());
    EXPECT_TRUE(got == p);
  }
  b->free(a);
  b->free(c);
  if (GetParam().honors_capacity) {
    EXPECT_EQ(b->mem_info().free, free0);
  }
  if (GetParam().honors_capacity) {
    EXPECT_THROW(b->allocate(b->mem_info().total + 1), OutOfMemoryError);
    EXPECT_EQ(b->mem_info().free, free0) << "a failed allocate took memory";
  }
}

TEST_P(BackendConformance, EventsCompleteAfterSynchronize) {
  MAKE_OR_SKIP(b, BackendParams{});
  std::vector<EventHandle> events;
  for (StreamId s : {StreamId(0), StreamId(7), StreamId(0x1234)}) events.push_back(b->record_event(s));
  b->synchronize();
  for (EventHandle e : events) EXPECT_TRUE(b->event_done(e));
  for (EventHandle e : events) b->release_event(e);
}

TEST_P(BackendConformance, ManualEventsFollowStreamOrder) {
  if (!GetParam().complete_stream) GTEST_SKIP() << GetParam().name << " has no manual event control";
  BackendParams params;
  params.manual_events = true;
  MAKE_OR_SKIP(b, params);
  const StreamId s1 = 1, s2 = 2;
  EventHandle e1 = b->record_event(s1);
  EventHandle e2 = b->record_event(s2);
  EXPECT_FALSE(b->event_done(e1));
  EXPECT_FALSE(b->event_done(e2));
  GetParam().complete_stream(*b, s1);
  EXPECT_TRUE(b->event_done(e1));
  EXPECT_FALSE(b->event_done(e2)) << "completing one stream completed another";
  EventHandle e3 = b->record_event(s1);
  EXPECT_FALSE(b->event_done(e3)) << "an event recorded after completion is already done";

  // A recycled handle must not inherit its previous life's state.
  b->release_event(e1);
  EventHandle e4 = b->record_event(s1);
  EXPECT_FALSE(b->event_done(e4));

  b->synchronize();
  for (EventHandle e : {e2, e3, e4}) EXPECT_TRUE(b->event_done(e));
  for (EventHandle e : {e2, e3, e4}) b->release_event(e);
}

TEST_P(BackendConformance, SynchronizingAStreamCompletesItsEvents) {
  BackendParams params;
  params.manual_events = true;
  MAKE_OR_SKIP(b, params);
  EventHandle e = b->record_event(3);
  b->synchronize_stream(3);
  EXPECT_TRUE(b->event_done(e));
  b->release_event(e);
}

TEST_P(BackendConformance, EventQueriesMayRunConcurrently) {
  MAKE_OR_SKIP(b, BackendParams{});
  std::vector<EventHandle> events;
  for (int i = 0; i < 16; ++i) events.push_back(b->record_event(StreamId(i % 4)));
  b->synchronize();
  std::atomic<int> not_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round) {
        for (EventHandle e : events)
          if (!b->event_done(e)) ++not_done;
        if (b->mem_info().total == 0) ++not_done;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(not_done.load(), 0);
  for (EventHandle e : events) b->release_event(e);
}

TEST_P(BackendConformance, CountsEveryDeviceCall) {
  MAKE_OR_SKIP(b, BackendParams{});
  const BackendCallCounts before = b->call_counts();
  EXPECT_EQ(before.device_calls(), 0u) << "a fresh backend has made no device calls";
  const std::size_t g = b->granularity();
  DevicePtr p = b->allocate(g);
  b->free(p);
  b->synchronize();
  if (b->supports_virtual_memory()) {
    DevicePtr va = b->reserve(2 * g);
    ChunkHandle c = b->create_chunk(g);
    b->map(va, g, c, 0);
    b->unmap(va, g);
    b->release_chunk(c);
    b->release_range(va, 2 * g);
  }
  const BackendCallCounts& n = b->call_counts();
  EXPECT_EQ(n.plain_allocs, 1u);
  EXPECT_EQ(n.plain_frees, 1u);
  EXPECT_EQ(n.syncs, 1u);
  if (b->supports_virtual_memory()) {
    EXPECT_EQ(n.reserves, 1u);
    EXPECT_EQ(n.range_releases, 1u);
    EXPECT_EQ(n.creates, 1u);
    EXPECT_EQ(n.maps, 1u);
    EXPECT_EQ(n.unmaps, 1u);
    EXPECT_EQ(n.chunk_releases, 1u);
    EXPECT_EQ(n.device_calls(), 6u);
    // One page: one driver call of each kind, plus at most one access-setting call.
    EXPECT_EQ(n.driver_creates, 1u);
    EXPECT_EQ(n.driver_maps, 1u);
    EXPECT_EQ(n.driver_unmaps, 1u);
    EXPECT_EQ(n.driver_releases, 1u);
    EXPECT_LE(n.access_sets, 1u);
  } else {
    EXPECT_EQ(n.device_calls(), 2u);
  }
}

TEST_P(BackendConformance, ReleasingUnknownThingsIsHarmless) {
  MAKE_OR_SKIP(b, BackendParams{});
  const std::size_t g = b->granularity();
  const MemInfo before = b->mem_info();
  b->free(DevicePtr(12345) * g);
  b->release_chunk(ChunkHandle(987654));
  b->release_event(EventHandle(987654));
  if (b->supports_virtual_memory()) {
    DevicePtr va = b->reserve(g);
    b->unmap(va, g);  // nothing mapped there
    b->release_range(va, g);
  }
  EXPECT_EQ(b->mem_info().free, before.free);
  EXPECT_EQ(b->call_counts().device_calls(), 0u) << "no-op releases were counted as device calls";
}

}  // namespace gpumem::conformance
