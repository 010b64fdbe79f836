// cuDNN's benchmark mode (torch.backends.cudnn.benchmark = True) bounds its workspace by the current
// allocator's cacheInfo(), a C++ virtual that PyTorch's CUDAPluggableAllocator answers with an error, and
// the pluggable interface has no hook for it. enable_torch_cache_info() therefore finds
// CUDAPluggableAllocator::cacheInfo by its exported name, finds the vtable slots in the same library's
// read-only-after-relocation data that point at it, and points them at a function answering from gpumem
// (gpumem_cache_info). It patches only when it finds between one and four such slots; otherwise it
// changes nothing and returns false (cuDNN benchmark then fails as it does without gpumem's help).
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "api/torch_oom.hpp"
#include "gpumem/gpumem.h"

namespace {

// c10::DeviceIndex is int8_t since PyTorch 2.1; `int` before.
void cache_info_device_int8(void* /*self*/, std::int8_t device, std::size_t* largest) noexcept {
  if (largest && gpumem_cache_info(device, largest) != GPUMEM_OK) *largest = 0;
}
void cache_info_device_int(void* /*self*/, int device, std::size_t* largest) noexcept {
  if (largest && gpumem_cache_info(device, largest) != GPUMEM_OK) *largest = 0;
}

struct Method {
  const char* symbol;
  void* replacement;
};
const Method kMethods[] = {
    {"_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator9cacheInfoEaPm",
     reinterpret_cast<void*>(&cache_info_device_int8)},
    {"_ZN5torch4cuda22CUDAPluggableAllocator22CUDAPluggableAllocator9cacheInfoEiPm",
     reinterpret_cast<void*>(&cache_info_device_int)},
};

void* find_symbol(const char* name) {
  if (void* p = dlsym(RTLD_DEFAULT, name)) return p;
  if (void* handle = dlopen("libtorch_cuda.so", RTLD_LAZY | RTLD_NOLOAD)) {  // torch loads it RTLD_LOCAL
    void* p = dlsym(handle, name);
    dlclose(handle);
    return p;
  }
  return nullptr;
}

struct Range {
  std::uintptr_t begin, end;
  bool read_only;
};

// The data ranges of the library that holds `code` where vtables live: its RELRO segment, else its
// writable segments.
std::vector<Range> vtable_ranges(const void* code) {
  struct Search {
    std::uintptr_t code;
    std::vector<Range> ranges;
  } search{reinterpret_cast<std::uintptr_t>(code), {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* s = static_cast<Search*>(data);
        bool holds_code = false;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->code >= begin && s->code < begin + ph.p_memsz) holds_code = true;
        }
        if (!holds_code) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const auto& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_GNU_RELRO)
            s->ranges.push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, true});
        }
        if (s->ranges.empty()) {
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            const auto& ph = info->dlpi_phdr[i];
            if (ph.p_type == PT_LOAD && (ph.p_flags & PF_W))
              s->ranges.push_back({info->dlpi_addr + ph.p_vaddr, info->dlpi_addr + ph.p_vaddr + ph.p_memsz, false});
          }
        }
        return 1;
      },
      &search);
  return search.ranges;
}

bool write_slot(void** slot, void* value, bool read_only) {
  const auto page = std::uintptr_t(sysconf(_SC_PAGESIZE));
  auto first = reinterpret_cast<std::uintptr_t>(slot) & ~(page - 1);
  void* start = reinterpret_cast<void*>(first);
  if (read_only && mprotect(start, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, value, __ATOMIC_RELEASE);
  if (read_only) mprotect(start, page, PROT_READ);
  return true;
}

}  // namespace

namespace gpumem::api {

bool enable_torch_cache_info() noexcept {
  static std::mutex mutex;
  static bool patched = false;
  std::lock_guard lock(mutex);
  if (patched) return true;
  for (const Method& m : kMethods) {
    void* original = find_symbol(m.symbol);
    if (!original) continue;
    std::vector<std::pair<void**, bool>> slots;
    for (const Range& r : vtable_ranges(original)) {
      auto begin = (r.begin + sizeof(void*) - 1) & ~(sizeof(void*) - 1);
      for (auto p = begin; p + sizeof(void*) <= r.end; p += sizeof(void*)) {
        if (*reinterpret_cast<void**>(p) == original) slots.push_back({reinterpret_cast<void**>(p), r.read_only});
      }
    }
    if (slots.empty() || slots.size() > 4) return false;
    for (auto [slot, read_only] : slots) {
      if (!write_slot(slot, m.replacement, read_only)) return false;
    }
    patched = true;
    return true;
  }
  return false;
}

}  // namespace gpumem::api
