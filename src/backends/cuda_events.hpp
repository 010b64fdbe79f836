// The CUDA backend's events: record_event() hands out a CUevent as the handle itself (event_done()
// queries it without a lookup or a lock), release_event() returns it to the pool for the next record.
//
// Contract: record() and take() with the backend's context (`own`) current (events belong to it); give()
// of an event not taken, or given twice, is ignored (the engine's handles are opaque to it; the driver
// would crash); destroy_all() once, with the context current, when the backend goes. Thread-safe.
// A stream of another context (record_stream with another GPU's stream: CUDA records an event only on a
// stream of its own context) gets an event made in that context for this record; give() destroys it
// instead of keeping it for this context's records.
#pragma once
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda_driver.hpp"

namespace gpumem::cuda {

class CudaEventPool {
 public:
  // An event recorded on `stream` (throws BackendError / OutOfMemoryError as check() does).
  CUevent record(CUstream stream, CUcontext own);
  CUevent take();
  void give(CUevent event) noexcept;
  void destroy_all() noexcept;

 private:
  CUevent take_foreign();
  std::mutex mutex_;
  std::vector<CUevent> free_;
  std::unordered_map<CUevent, bool> all_;  // every event made -> in use
  std::unordered_map<CUevent, bool> foreign_;  // made in other contexts, in use until given back
};

}  // namespace gpumem::cuda
