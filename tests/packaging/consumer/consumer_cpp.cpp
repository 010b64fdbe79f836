// A C++ program outside the gpumem tree using gpumem's C++ API (include/gpumem/*.hpp) from the installed
// libgpumem.so: an Allocator of its own over the sim backend, the process-wide default allocators of
// memory.hpp (given a sim backend through set_backend_factory), and gpumem::OutOfMemoryError caught here
// although the library threw it (its typeinfo is exported).
#include <gpumem/allocator.hpp>
#include <gpumem/errors.hpp>
#include <gpumem/memory.hpp>
#include <gpumem/sim_backend.hpp>

#include <cstdio>
#include <memory>

#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                       \
    }                                                                 \
  } while (0)

int main() {
  gpumem::SimBackendOptions sim;
  sim.capacity = std::size_t(64) << 20;
  auto backend = std::make_shared<gpumem::SimBackend>(sim);
  {
    gpumem::Allocator allocator(backend);
    void* p = allocator.allocate(std::size_t(3) << 20);
    CHECK(p != nullptr);
    CHECK(allocator.stats().allocated_bytes[gpumem::kAggregatePool].current == std::int64_t(3) << 20);
    bool caught = false;
    try {
      allocator.allocate(std::size_t(1) << 30);  // more than the device holds
    } catch (const gpumem::OutOfMemoryError& e) {
      caught = e.state().requested >= (std::size_t(1) << 30);
    }
    CHECK(caught);
    allocator.deallocate(p);
    allocator.empty_cache();
    CHECK(backend->used_bytes() == 0);
  }

  gpumem::set_backend_factory([](int) { return std::make_shared<gpumem::SimBackend>(); });
  void* q = gpumem::default_allocator(0).allocate(std::size_t(5) << 20);
  CHECK(gpumem::memory_allocated(0) == std::size_t(5) << 20);
  CHECK(gpumem::memory_stats(0).at("allocated_bytes.all.current") == std::int64_t(5) << 20);
  gpumem::default_allocator(0).deallocate(q);
  CHECK(gpumem::memory_allocated(0) == 0);
  CHECK(gpumem::max_memory_allocated(0) == std::size_t(5) << 20);
  try {
    gpumem::default_allocator(0).set_limit(1);  // below one page
    CHECK(!"set_limit(1) did not throw");
  } catch (const std::exception&) {
  }
  std::printf("C++ consumer ok: %s\n", gpumem::format_bytes(gpumem::max_memory_allocated(0)).c_str());
  return 0;
}
