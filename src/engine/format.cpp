#include <cstdio>
#include <string>

#include "gpumem/errors.hpp"
#include "gpumem/events.hpp"

namespace gpumem {

std::string format_bytes(std::size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", value, units[unit]);
  return buf;
}

const char* event_kind_name(EventKind kind) noexcept {
  switch (kind) {
    case EventKind::alloc: return "alloc";
    case EventKind::free_requested: return "free_requested";
    case EventKind::free_completed: return "free_completed";
    case EventKind::segment_alloc: return "segment_alloc";
    case EventKind::segment_free: return "segment_free";
    case EventKind::segment_map: return "segment_map";
    case EventKind::segment_unmap: return "segment_unmap";
    case EventKind::stitch: return "stitch";
    case EventKind::give_back: return "give_back";
    case EventKind::oom: return "oom";
  }
  return "unknown";
}

}  // namespace gpumem
