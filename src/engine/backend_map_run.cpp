// The default Backend::map_run: one map() per call (backends without a per-run cost need nothing more).
#include "gpumem/backend.hpp"

namespace gpumem {

void Backend::map_run(DevicePtr va, const std::vector<MapCall>& calls) {
  std::size_t done = 0, at = 0;
  try {
    for (; done < calls.size(); ++done) {
      map(va + at, calls[done].bytes, calls[done].chunk, calls[done].offset);
      at += calls[done].bytes;
    }
  } catch (...) {
    for (std::size_t i = done; i-- > 0;) {
      at -= calls[i].bytes;
      unmap(va + at, calls[i].bytes);
    }
    throw;
  }
}

}  // namespace gpumem
