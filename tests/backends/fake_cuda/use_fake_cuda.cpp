// Linked into a test executable: the CUDA backends load the driver test double instead of libcuda.so.1
// (set before any test runs; the driver is loaded at the first CUDA call).
#include <cstdlib>

#include "backends/fake_cuda/fake_cuda.hpp"

namespace {
// Two devices: a stream of the second one is another context's (cross-device record_stream).
const bool use_fake_cuda = [] {
  return setenv("GPUMEM_LIBCUDA", gpumem::testing::fake_cuda_path().c_str(), 1) == 0 &&
         setenv("GPUMEM_FAKE_CUDA_DEVICES", "2", 0) == 0;
}();
}  // namespace
