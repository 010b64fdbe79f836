// Private pools through the C ABI: PyTorch's graph-pool hooks (torch_hooks.hpp) and the ctypes entry points
// of gpumem.h that the Python shim uses for MemPool and CUDA graph trees (checkpoints).
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include "api/registry_internal.hpp"
#include "api/status.hpp"
#include "api/torch_hooks.hpp"
#include "gpumem/gpumem.h"
#include "gpumem/memory.hpp"

namespace {
using namespace gpumem;

// Checkpoints handed to Python by number: CUDA graph trees keep them as opaque objects.
struct Checkpoints {
  std::mutex mutex;
  long next = 1;
  std::map<long, std::pair<int, PoolCheckpoint>> by_handle;
};
Checkpoints& checkpoints() {
  static Checkpoints* c = new Checkpoints;  // never destroyed: Python may free handles during exit
  return *c;
}

long copy_addresses(const std::vector<DevicePtr>& addrs, uintptr_t* out, size_t cap) {
  for (std::size_t i = 0; i < addrs.size() && i < cap && out; ++i) out[i] = addrs[i];
  return long(addrs.size());
}
}  // namespace

extern "C" {

void gpumem_begin_allocate_to_pool(int device, api::TorchPoolId pool, api::TorchStreamFilter filter) {
  try {
    default_allocator(device).begin_allocate_to_pool(
        pool, [f = std::move(filter)](StreamId s) { return f(reinterpret_cast<api::TorchStream>(s)); });
  } catch (const std::exception& e) {
    api::remember_error(e.what());
    throw;  // PyTorch turns it into a Python exception at capture_begin: the capture does not start
  }
}

void gpumem_end_allocate_to_pool(int device, api::TorchPoolId pool) {
  if (Allocator* a = find_default_allocator(device)) a->end_allocate_to_pool(pool);
}

void gpumem_release_pool(int device, api::TorchPoolId pool) {
  if (Allocator* a = find_default_allocator(device)) a->release_pool(pool);
}

int gpumem_pool_incref(int device, unsigned long long a, unsigned long long b) {
  return api::guarded([&] { default_allocator(device).create_or_incref_pool({a, b}); });
}

int gpumem_pool_release(int device, unsigned long long a, unsigned long long b) {
  return api::guarded([&] { default_allocator(device).release_pool({a, b}); });
}

int gpumem_pool_set_use_on_oom(int device, unsigned long long a, unsigned long long b, int on) {
  return api::guarded([&] { default_allocator(device).set_pool_use_on_oom({a, b}, on != 0); });
}

int gpumem_pool_use_count(int device, unsigned long long a, unsigned long long b) {
  int count = 0;
  int rc = api::guarded([&] { count = default_allocator(device).pool_use_count({a, b}); });
  return rc == GPUMEM_OK ? count : rc;
}

long gpumem_pool_live_blocks(int device, unsigned long long a, unsigned long long b, uintptr_t* out, size_t cap) {
  long n = 0;
  int rc = api::guarded([&] { n = copy_addresses(default_allocator(device).pool_live_blocks({a, b}), out, cap); });
  return rc == GPUMEM_OK ? n : rc;
}

long gpumem_pool_checkpoint(int device, unsigned long long a, unsigned long long b) {
  long handle = 0;
  int rc = api::guarded([&] {
    PoolCheckpoint cp = default_allocator(device).checkpoint_pool({a, b});
    Checkpoints& c = checkpoints();
    std::lock_guard lock(c.mutex);
    handle = c.next++;
    c.by_handle.emplace(handle, std::make_pair(device, std::move(cp)));
  });
  return rc == GPUMEM_OK ? handle : rc;
}

long gpumem_pool_restore(long handle, uintptr_t* out, size_t cap) {
  long n = 0;
  int rc = api::guarded([&] {
    std::pair<int, PoolCheckpoint> entry;
    {
      Checkpoints& c = checkpoints();
      std::lock_guard lock(c.mutex);
      auto it = c.by_handle.find(handle);
      if (it == c.by_handle.end()) throw std::invalid_argument("gpumem: unknown pool checkpoint handle");
      entry = it->second;
    }
    n = copy_addresses(default_allocator(entry.first).restore_pool(entry.second), out, cap);
  });
  return rc == GPUMEM_OK ? n : rc;
}

int gpumem_pool_checkpoint_free(long handle) {
  Checkpoints& c = checkpoints();
  std::lock_guard lock(c.mutex);
  return c.by_handle.erase(handle) ? GPUMEM_OK : GPUMEM_E_INVALID;
}

}  // extern "C"
