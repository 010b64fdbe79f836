// A program outside the gpumem tree, built against an installed gpumem (find_package or pkg-config):
// allocates through the C ABI on the backend GPUMEM_BACKEND names and checks the counters follow.
#include <gpumem/gpumem.h>

#include <cstdio>
#include <cstring>

int main() {
  void* p = nullptr;
  if (gpumem_allocate(3 << 20, 0, nullptr, &p) != GPUMEM_OK) {
    std::fprintf(stderr, "FAIL allocate: %s\n", gpumem_last_error());
    return 1;
  }
  char backend[32] = {};
  gpumem_backend_name(0, backend, sizeof backend);
  const size_t live = gpumem_memory_allocated(0);
  if (std::strcmp(backend, "host") == 0) std::memset(p, 0x5a, 3 << 20);  // host memory: really ours to touch
  if (gpumem_deallocate(p, 0, nullptr) != GPUMEM_OK || live != (3u << 20) || gpumem_memory_allocated(0) != 0) {
    std::fprintf(stderr, "FAIL counters: allocated %zu while live\n", live);
    return 1;
  }
  std::printf("consumer ok: gpumem %s, backend %s, %zu bytes live at the peak\n", gpumem_version(), backend, live);
  return 0;
}
