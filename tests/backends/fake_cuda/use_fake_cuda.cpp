// Linked into a test executable: the CUDA backends load the driver test double instead of libcuda.so.1
// (set before any test runs; the driver is loaded at the first CUDA call).
#include <cstdlib>

#include "backends/fake_cuda/fake_cuda.hpp"

namespace {
const bool use_fake_cuda = [] { return setenv("GPUMEM_LIBCUDA", gpumem::testing::fake_cuda_path().c_str(), 1) == 0; }();
}  // namespace
