// The conformance suite, continued: map_run() (several map calls as one run, all or none) and
// release_chunk_part() (some pages of a chunk given back, the rest still usable), for every backend.
#include "backends/conformance.hpp"

#include <algorithm>
#include <vector>

namespace gpumem::conformance {
namespace {

std::vector<std::uint8_t> bytes_of(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::uint8_t(seed + i * 7 + i / 4096);
  return v;
}

}  // namespace

TEST_P(BackendConformance, MapRunMapsEachCallInOrderAndEachUnmapsAlone) {
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  DevicePtr va = b->reserve(4 * g);
  ChunkHandle c1 = b->create_chunk(2 * g), c2 = b->create_chunk(g);
  const std::uint64_t maps = b->call_counts().maps;
  // Pages: c1[1], c2[0], c1[0]: out of chunk order, each its own map call.
  b->map_run(va, {{g, c1, g}, {g, c2, 0}, {g, c1, 0}});
  EXPECT_EQ(b->call_counts().maps, maps + 3);
  expect_live_mappings(*b, 3u);
  if (GetParam().has_real_memory) {
    auto data = bytes_of(3 * g, 11);
    write(*b, va, data.data(), data.size());
    DevicePtr check = b->reserve(2 * g);
    b->map(check, 2 * g, c1, 0);  // c1 in its own order: page 0 is what va+2g holds, page 1 what va holds
    std::vector<std::uint8_t> got(2 * g);
    read(*b, got.data(), check, 2 * g);
    EXPECT_TRUE(std::equal(got.begin(), got.begin() + g, data.begin() + 2 * g));
    EXPECT_TRUE(std::equal(got.begin() + g, got.end(), data.begin()));
    b->unmap(check, 2 * g);
    b->release_range(check, 2 * g);
  }
  // A run that cannot be mapped whole leaves nothing mapped.
  EXPECT_THROW(b->map_run(va + 3 * g, {{g, c2, 0}, {g, c1, 5 * g}}), BackendError);
  expect_live_mappings(*b, 3u);
  for (std::size_t i = 0; i < 3; ++i) b->unmap(va + i * g, g);
  expect_live_mappings(*b, 0u);
  b->release_chunk(c1);
  b->release_chunk(c2);
  b->release_range(va, 4 * g);
}

TEST_P(BackendConformance, ReleasingPartOfAChunkFreesThosePagesAndKeepsTheRest) {
  MAKE_OR_SKIP(b, BackendParams{});
  REQUIRE_VMM(b);
  const std::size_t g = b->granularity();
  const std::size_t free0 = b->mem_info().free;
  DevicePtr va = b->reserve(4 * g);
  ChunkHandle c = b->create_chunk(4 * g);
  b->map(va + 3 * g, g, c, 3 * g);  // page 3 stays in use
  auto data = bytes_of(g, 5);
  if (GetParam().has_real_memory) write(*b, va + 3 * g, data.data(), g);
  EXPECT_FALSE(b->release_chunk_part(c, 1, g)) << "unaligned: refused";
  EXPECT_FALSE(b->release_chunk_part(c, 2 * g, 4 * g)) << "past the chunk's end: refused";
  if (!b->release_chunk_part(c, 0, 2 * g)) {
    GTEST_SKIP() << GetParam().name << " cannot release part of a chunk";
  }
  if (GetParam().honors_capacity) {
    EXPECT_EQ(b->mem_info().free, free0 - 2 * g) << "two of four pages went back";
  }
  if (GetParam().has_real_memory) {
    std::vector<std::uint8_t> got(g);
    read(*b, got.data(), va + 3 * g, g);
    EXPECT_EQ(got, data) << "the pages still in use kept their bytes";
  }
  b->map(va + 2 * g, g, c, 2 * g);  // a page not released still maps
  b->unmap(va + 2 * g, g);
  b->unmap(va + 3 * g, g);
  b->release_chunk(c);  // frees what is left, once
  b->release_range(va, 4 * g);
  if (GetParam().honors_capacity) {
    EXPECT_EQ(b->mem_info().free, free0);
  }
  expect_live_chunks(*b, 0u);
}

}  // namespace gpumem::conformance
