// gpumem's own JSON of allocator snapshots: everything AllocatorSnapshot holds (holes and mappings
// too, which PyTorch's format has no place for). Written region by region.
#include <nlohmann/json.hpp>

#include "report/torch_snapshot.hpp"

namespace gpumem::report {

void write_snapshot_json(const std::vector<AllocatorSnapshot>& devices, std::ostream& out) {
  out << "{\"version\":1,\"devices\":[";
  for (std::size_t d = 0; d < devices.size(); ++d) {
    const AllocatorSnapshot& s = devices[d];
    nlohmann::json head = {{"device", s.device},       {"backend", s.backend},
                           {"granularity", s.granularity}, {"limit", s.limit},
                           {"reserved", s.reserved},   {"allocated", s.allocated_bytes()},
                           {"free_physical", s.free_physical},
                           {"part_page_physical", s.part_page_physical}, {"stats", s.stats.as_map()}};
    std::string h = head.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    h.pop_back();  // reopen the object for the streamed arrays
    out << (d ? "," : "") << h << ",\"regions\":[";
    for (std::size_t i = 0; i < s.regions.size(); ++i) {
      const SnapshotRegion& r = s.regions[i];
      // Block by block: a region may hold a million blocks, which as one JSON value would take far more
      // memory than the snapshot itself. Keys in the order nlohmann's objects print them.
      out << (i ? "," : "") << "{\"base\":" << r.base << ",\"blocks\":[";
      for (std::size_t k = 0; k < r.blocks.size(); ++k) {
        const SnapshotBlock& b = r.blocks[k];
        out << (k ? "," : "") << "{\"address\":" << b.addr << ",\"requested\":" << b.requested
            << ",\"size\":" << b.size << ",\"state\":\"" << snapshot_block_state_name(b.state) << "\"}";
      }
      nlohmann::json rest = {{"size", r.size},     {"mapped", r.mapped}, {"stream", r.stream},
                             {"pool", r.small_pool ? "small" : "large"}, {"plain", r.plain}};
      std::string tail = rest.dump();
      tail.front() = ',';  // continues the region's object
      out << "]" << tail;
    }
    out << "],\"mappings\":[";
    for (std::size_t i = 0; i < s.mappings.size(); ++i) {
      const SnapshotMapping& m = s.mappings[i];
      out << (i ? "," : "")
          << nlohmann::json({{"va", m.va}, {"bytes", m.bytes}, {"chunk", m.chunk}, {"offset", m.offset}}).dump();
    }
    out << "]}";
  }
  out << "]}\n";
  out.flush();
  if (!out) throw std::runtime_error("gpumem: could not write the snapshot JSON");
}

}  // namespace gpumem::report
