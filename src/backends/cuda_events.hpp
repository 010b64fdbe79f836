// The CUDA backend's events: record_event() hands out a CUevent as the handle itself (event_done()
// queries it without a lookup or a lock), release_event() returns it to the pool for the next record.
//
// Contract: take() with the backend's context current (events belong to it); give() of an event not
// taken, or given twice, is ignored (the engine's handles are opaque to it; the driver would crash);
// destroy_all() once, with the context current, when the backend goes. Thread-safe.
// An event for another context's stream (record_stream with another GPU's stream: CUDA records an event
// only on a stream of its own context) comes from take_foreign() with that context current; give()
// destroys it instead of keeping it for this context's records.
#pragma once
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backends/cuda_driver.hpp"

namespace gpumem::cuda {

class CudaEventPool {
 public:
  CUevent take();
  CUevent take_foreign();
  void give(CUevent event) noexcept;
  void destroy_all() noexcept;

 private:
  std::mutex mutex_;
  std::vector<CUevent> free_;
  std::unordered_map<CUevent, bool> all_;  // every event made -> in use
  std::unordered_map<CUevent, bool> foreign_;  // made in other contexts, in use until given back
};

}  // namespace gpumem::cuda
