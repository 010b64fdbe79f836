// explain_excess over snapshots of a real allocator on the sim device: every byte reserved beyond the
// allocated ones is found in exactly one place, and a free byte counts as part-page or whole-page by
// whether its page also holds live bytes.
#include <gtest/gtest.h>

#include <memory>

#include "gpumem/allocator.hpp"
#include "gpumem/sim_backend.hpp"
#include "report/excess.hpp"

namespace gpumem::report {
namespace {
constexpr std::size_t kMiB = std::size_t(1) << 20;

std::size_t accounted(const ExcessBreakdown& b) {
  return b.small.part_page_free + b.small.whole_page_free + b.large.part_page_free + b.large.whole_page_free +
         b.mapped_nowhere + b.parted_pages + b.waiting_on_streams + b.plain_free;
}

TEST(ExplainExcess, SplitsFreeBytesByWhetherTheirPageHoldsLiveBytes) {
  Allocator a(std::make_shared<SimBackend>());
  void* kept = a.allocate(3 * kMiB, 0);  // pages [0, 2) and [2, 4) MiB: the second half used
  void* gone = a.allocate(4 * kMiB, 0);  // from 3 MiB (the free tail) to 7: up to 8 MiB mapped
  void* tiny = a.allocate(4096, 0);      // the small pool: one 2 MiB page, 4 KiB of it used
  a.deallocate(gone, 0);                 // free from 3 to 8 MiB: 1 MiB beside `kept`, then two whole pages
  const ExcessBreakdown b = explain_excess(a.snapshot());
  EXPECT_EQ(b.allocated, 3 * kMiB + 4096);
  EXPECT_EQ(b.reserved, 10 * kMiB);
  EXPECT_EQ(b.excess(), 10 * kMiB - 3 * kMiB - 4096);
  EXPECT_EQ(b.large.part_page_free, 1 * kMiB);
  EXPECT_EQ(b.large.part_pages, 1u);
  EXPECT_EQ(b.large.whole_page_free, 4 * kMiB);
  EXPECT_EQ(b.large.whole_pages, 2u);
  EXPECT_EQ(b.small.part_page_free, 2 * kMiB - 4096);
  EXPECT_EQ(b.small.part_pages, 1u);
  EXPECT_EQ(b.small.whole_pages, 0u);
  EXPECT_EQ(b.streams, 1u);
  EXPECT_EQ(accounted(b), b.excess());
  a.empty_cache();  // the whole pages go back; the part-pages stay with their live bytes
  const ExcessBreakdown after = explain_excess(a.snapshot());
  EXPECT_EQ(after.large.whole_pages, 0u);
  EXPECT_EQ(after.large.part_page_free, 1 * kMiB);
  EXPECT_EQ(accounted(after), after.excess());
  a.deallocate(kept, 0);
  a.deallocate(tiny, 0);
}

// Blocks freed on one stream while another still uses them wait (record_stream): not reusable, not allocated.
TEST(ExplainExcess, BlocksWaitingOnOtherStreamsAreNamed) {
  SimBackendOptions o;
  o.manual_events = true;
  auto backend = std::make_shared<SimBackend>(o);
  Allocator a(backend);
  void* p = a.allocate(6 * kMiB, 1);
  a.record_stream(p, 2);
  a.deallocate(p, 1);
  const ExcessBreakdown b = explain_excess(a.snapshot());
  EXPECT_EQ(b.allocated, 0u);
  EXPECT_EQ(b.waiting_on_streams, 6 * kMiB);
  EXPECT_EQ(accounted(b), b.excess());
  backend->complete_stream(2);
}

}  // namespace
}  // namespace gpumem::report
