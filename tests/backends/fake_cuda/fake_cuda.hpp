// The CUDA driver test double (libgpumem_fake_cuda.so, loaded through GPUMEM_LIBCUDA): the driver API
// entry points the CUDA backends call, over host memory, keeping CUDA's rules so that a backend that
// breaks one fails here as it would on a GPU:
//  - physical pages (cuMemCreate) are whole-granule memfds: importable from their exported fds (also in
//    another process), freed once released and mapped nowhere; capacity GPUMEM_FAKE_CUDA_MIB (8192);
//  - cuMemMap maps a whole allocation at offset 0 inside a reserved range, never over another mapping;
//    cuMemUnmap takes whole mappings; cuMemSetAccess only over mapped bytes; a copy only through
//    mapped bytes with access (or cuMemAlloc memory);
//  - calls that need a context (copies, cuMemAlloc, events, streams, synchronize) fail without one
//    current on the calling thread; events complete at once, or (fake_cuda_hold_work) only once their
//    stream or the device is synchronized, as when a kernel still runs.
// fake_cuda_state() reads what the driver holds, for leak checks; fake_cuda_fail_next() makes a call
// fail once (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemAddressReserve, cuMemAlloc, cuEventCreate,
// cuEventRecord), as a driver does when the device is lost or a container forbids exportable memory.
#pragma once
#include <dlfcn.h>

#include <cstddef>
#include <string>

namespace gpumem::testing {

struct FakeCudaState {
  std::size_t handles = 0;   // physical allocations not yet freed (released ones still mapped included)
  std::size_t mappings = 0;
  std::size_t ranges = 0;    // reserved address ranges
  std::size_t plain = 0;     // cuMemAlloc allocations
  std::size_t used_bytes = 0;
  std::size_t events = 0;    // created, not destroyed
  std::size_t creates = 0, maps = 0, unmaps = 0, set_access = 0;  // calls that succeeded, in all
  std::size_t errors = 0;    // calls that broke a rule (returned an error other than out of memory)
};

inline std::string fake_cuda_path() { return GPUMEM_BINARY_DIR "/fake_cuda/libgpumem_fake_cuda.so"; }

// An entry point of the double, loaded here if the driver was not yet (the backends' own dlopen of the
// same path then finds it: one copy, one state); nullptr when it is not built.
inline void* fake_cuda_library() {
  static void* lib = dlopen(fake_cuda_path().c_str(), RTLD_NOW | RTLD_LOCAL);  // kept for the process
  return lib;
}
template <typename Fn>
Fn* fake_cuda_entry(const char* name) {
  void* lib = fake_cuda_library();
  return lib ? reinterpret_cast<Fn*>(dlsym(lib, name)) : nullptr;
}

// What the double holds now.
inline FakeCudaState fake_cuda_state() {
  FakeCudaState s;
  if (auto fn = fake_cuda_entry<void(FakeCudaState*)>("gpumemFakeCudaState")) fn(&s);
  return s;
}

// Recorded events stay pending until their stream (or the device) is synchronized, while `hold` is set.
inline void fake_cuda_hold_work(bool hold) {
  if (auto fn = fake_cuda_entry<void(bool)>("gpumemFakeCudaHoldWork")) fn(hold);
}

// The call named fails with `code` after `after` more calls of it succeed (on any thread).
inline void fake_cuda_fail_next(const char* call, int after, int code) {
  if (auto fn = fake_cuda_entry<void(const char*, int, int)>("gpumemFakeCudaFailNext")) fn(call, after, code);
}

}  // namespace gpumem::testing
