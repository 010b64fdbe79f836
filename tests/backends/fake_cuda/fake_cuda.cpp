// The CUDA driver test double: see fake_cuda.hpp for the rules it keeps.
#include "backends/fake_cuda/fake_cuda.hpp"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backends/cuda_driver.hpp"

namespace gpumem::cuda {
struct CUctx_st {
  int device = 0;
  int retained = 0;
};
struct CUstream_st {
  int device = 0;
};
struct CUevent_st {
  bool done = true;  // work before it finished
  CUstream stream = nullptr;
  CUctx_st* context = nullptr;  // the one current when it was made: it records only that context's streams
};
}  // namespace gpumem::cuda

namespace {
using namespace gpumem::cuda;
using gpumem::testing::FakeCudaState;

constexpr CUresult kInvalidContext = 201, kAlreadyMapped = 208, kNotMapped = 211, kInvalidHandle = 400,
                   kIllegalAddress = 700;
constexpr std::size_t kGranule = std::size_t(2) << 20;
constexpr int kMostDevices = 8;

struct Physical {
  std::size_t size = 0;
  int fd = -1;
  char* mem = nullptr;
  int mappings = 0;
  bool released = false;
  bool counted = false;  // in used_bytes (an import shares its exporter's)
  bool exportable = false;
};
struct Mapping {
  std::size_t size = 0;
  CUmemGenericAllocationHandle handle = 0;
  bool access = false;
};
struct Plain {
  std::size_t size = 0;
  char* mem = nullptr;
};

struct FakeDriver {
  std::mutex mutex;
  int devices = 1;
  std::size_t capacity = std::size_t(8192) << 20;
  CUctx_st contexts[kMostDevices];
  std::unordered_map<CUmemGenericAllocationHandle, Physical> physical;
  CUmemGenericAllocationHandle next_handle = 1;
  std::map<CUdeviceptr, std::size_t> ranges;  // base -> size
  CUdeviceptr next_va = CUdeviceptr(0x7e0000000000);
  std::map<CUdeviceptr, Mapping> mappings;  // va -> mapping
  std::map<CUdeviceptr, Plain> plain;
  CUdeviceptr next_plain = CUdeviceptr(0x500000000000);
  FakeCudaState counts;
  std::set<CUevent> events;
  std::set<CUstream> streams;  // made by cuStreamCreate (tests also pass made-up handles: any context's)
  bool hold_work = false;  // recorded events stay pending until their stream or the device is synchronized
  struct Fault {
    std::string call;
    int countdown = 0;  // calls of `call` to let through first
    CUresult code = CUDA_SUCCESS;
  } fault;
};

FakeDriver& the() {
  static FakeDriver* d = new FakeDriver;  // never destroyed: threads may call in during exit
  return *d;
}
thread_local CUcontext current = nullptr;
thread_local int capture_mode = 0;

// A failure asked for by a test (gpumemFakeCudaFailNext), with the driver's lock held.
CUresult injected(FakeDriver& d, const char* call) {
  if (d.fault.code == CUDA_SUCCESS || d.fault.call != call) return CUDA_SUCCESS;
  if (d.fault.countdown-- > 0) return CUDA_SUCCESS;
  const CUresult r = d.fault.code;
  d.fault = {};
  return r;
}

CUresult broke(FakeDriver& d, CUresult r) {
  ++d.counts.errors;
  return r;
}
std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }
bool has_context() { return current && current->retained > 0; }

void free_if_unused(FakeDriver& d, CUmemGenericAllocationHandle h) {
  auto it = d.physical.find(h);
  if (it == d.physical.end() || !it->second.released || it->second.mappings) return;
  munmap(it->second.mem, it->second.size);
  close(it->second.fd);
  if (it->second.counted) d.counts.used_bytes -= it->second.size;
  d.physical.erase(it);
}

// The host bytes behind device address p, and in *run how many follow it in the same mapping or
// cuMemAlloc allocation; nullptr where p is not mapped with access.
char* host_at(FakeDriver& d, CUdeviceptr p, std::size_t* run) {
  auto pl = d.plain.upper_bound(p);
  if (pl != d.plain.begin() && p < std::prev(pl)->first + std::prev(pl)->second.size) {
    --pl;
    *run = pl->first + pl->second.size - p;
    return pl->second.mem + (p - pl->first);
  }
  auto m = d.mappings.upper_bound(p);
  if (m == d.mappings.begin()) return nullptr;
  --m;
  if (p >= m->first + m->second.size || !m->second.access) return nullptr;
  *run = m->first + m->second.size - p;
  return d.physical.at(m->second.handle).mem + (p - m->first);
}

template <typename Copy>
CUresult copy(CUdeviceptr device, std::size_t bytes, Copy each) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!has_context()) return broke(d, kInvalidContext);
  for (std::size_t done = 0; done < bytes;) {
    std::size_t run = 0;
    char* at = host_at(d, device + done, &run);
    if (!at) return broke(d, kIllegalAddress);
    run = std::min(run, bytes - done);
    each(at, done, run);
    done += run;
  }
  return CUDA_SUCCESS;
}

// The mappings that exactly tile [p, p+size), or end() if they do not.
std::map<CUdeviceptr, Mapping>::iterator whole_mappings(FakeDriver& d, CUdeviceptr p, std::size_t size) {
  auto first = d.mappings.find(p);
  CUdeviceptr at = p;
  for (auto it = first; it != d.mappings.end() && it->first == at && at < p + size; ++it) at += it->second.size;
  return at == p + size && size ? first : d.mappings.end();
}
}  // namespace

#define FAKE_CU extern "C" __attribute__((visibility("default"))) CUresult

extern "C" __attribute__((visibility("default"))) void gpumemFakeCudaState(FakeCudaState* out) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  *out = d.counts;
  out->handles = d.physical.size();
  out->mappings = d.mappings.size();
  out->ranges = d.ranges.size();
  out->plain = d.plain.size();
}

extern "C" __attribute__((visibility("default"))) void gpumemFakeCudaHoldWork(bool hold) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  d.hold_work = hold;
}

extern "C" __attribute__((visibility("default"))) void gpumemFakeCudaFailNext(const char* call, int after, CUresult code) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  d.fault = {call, after, code};
}

FAKE_CU cuInit(unsigned) {
  FakeDriver& d = the();
  if (const char* n = std::getenv("GPUMEM_FAKE_CUDA_DEVICES")) d.devices = std::max(1, std::min(kMostDevices, std::atoi(n)));
  if (const char* mib = std::getenv("GPUMEM_FAKE_CUDA_MIB")) d.capacity = std::size_t(std::atoll(mib)) << 20;
  for (int i = 0; i < kMostDevices; ++i) d.contexts[i].device = i;
  rlimit files{};  // one descriptor per physical page (exportable, as the driver's)
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = std::min<rlim_t>(files.rlim_max, 1 << 16);
    setrlimit(RLIMIT_NOFILE, &files);
  }
  return CUDA_SUCCESS;
}
FAKE_CU cuDriverGetVersion(int* v) { return *v = 13000, CUDA_SUCCESS; }
FAKE_CU cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "no error" : r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "fake driver error";
  return CUDA_SUCCESS;
}
FAKE_CU cuGetErrorName(CUresult r, const char** s) {
  *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : r == CUDA_ERROR_OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
FAKE_CU cuDeviceGetCount(int* n) { return *n = the().devices, CUDA_SUCCESS; }
FAKE_CU cuDeviceGet(CUdevice* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= the().devices) return CUDA_ERROR_INVALID_DEVICE;
  return *dev = ordinal, CUDA_SUCCESS;
}
FAKE_CU cuDeviceGetName(char* name, int len, CUdevice) {
  std::snprintf(name, std::size_t(len), "%s", "gpumem fake CUDA device");
  return CUDA_SUCCESS;
}
FAKE_CU cuDeviceGetAttribute(int* value, int attribute, CUdevice) {
  *value = attribute == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_CU cuDeviceCanAccessPeer(int* can, CUdevice, CUdevice) { return *can = 1, CUDA_SUCCESS; }
FAKE_CU cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (dev < 0 || dev >= d.devices) return broke(d, CUDA_ERROR_INVALID_DEVICE);
  ++d.contexts[dev].retained;
  return *ctx = &d.contexts[dev], CUDA_SUCCESS;
}
FAKE_CU cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (dev < 0 || dev >= d.devices || d.contexts[dev].retained == 0) return broke(d, CUDA_ERROR_INVALID_DEVICE);
  --d.contexts[dev].retained;
  return CUDA_SUCCESS;
}
FAKE_CU cuCtxGetCurrent(CUcontext* ctx) { return *ctx = current, CUDA_SUCCESS; }
FAKE_CU cuCtxSetCurrent(CUcontext ctx) { return current = ctx, CUDA_SUCCESS; }
// Work queued on `stream` (every stream when null) is done.
CUresult synchronize(CUstream stream, bool all) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!has_context()) return broke(d, kInvalidContext);
  for (CUevent e : d.events)  // a context's synchronize covers its own work only
    if ((all && e->context == current) || e->stream == stream) e->done = true;
  return CUDA_SUCCESS;
}
FAKE_CU cuCtxSynchronize() { return synchronize(nullptr, true); }
FAKE_CU cuStreamSynchronize(CUstream stream) { return synchronize(stream, false); }
FAKE_CU cuStreamCreate(CUstream* s, unsigned) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!has_context()) return broke(d, kInvalidContext);
  *s = new CUstream_st{current->device};
  d.streams.insert(*s);
  return CUDA_SUCCESS;
}
FAKE_CU cuStreamDestroy_v2(CUstream s) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!d.streams.erase(s)) return broke(d, kInvalidHandle);
  return delete s, CUDA_SUCCESS;
}
FAKE_CU cuStreamGetCtx(CUstream s, CUcontext* ctx) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  *ctx = d.streams.count(s) ? &d.contexts[s->device] : current;
  return CUDA_SUCCESS;
}

FAKE_CU cuMemGetInfo_v2(std::size_t* free, std::size_t* total) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!has_context()) return broke(d, kInvalidContext);
  *total = d.capacity;
  *free = d.capacity - std::min(d.capacity, d.counts.used_bytes);
  return CUDA_SUCCESS;
}
FAKE_CU cuMemAlloc_v2(CUdeviceptr* ptr, std::size_t bytes) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuMemAlloc")) return r;
  if (!has_context()) return broke(d, kInvalidContext);
  const std::size_t size = round_up(std::max<std::size_t>(bytes, 1), kGranule);
  if (d.counts.used_bytes + size > d.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  *ptr = d.next_plain;
  d.next_plain += size + kGranule;
  d.plain[*ptr] = Plain{size, static_cast<char*>(mem)};
  d.counts.used_bytes += size;
  return CUDA_SUCCESS;
}
FAKE_CU cuMemFree_v2(CUdeviceptr ptr) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!has_context()) return broke(d, kInvalidContext);
  auto it = d.plain.find(ptr);
  if (it == d.plain.end()) return broke(d, CUDA_ERROR_INVALID_VALUE);
  munmap(it->second.mem, it->second.size);
  d.counts.used_bytes -= it->second.size;
  d.plain.erase(it);
  return CUDA_SUCCESS;
}
FAKE_CU cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t bytes) {
  return copy(dst, bytes, [&](char* at, std::size_t done, std::size_t n) { std::memcpy(at, static_cast<const char*>(src) + done, n); });
}
FAKE_CU cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t bytes) {
  return copy(src, bytes, [&](char* at, std::size_t done, std::size_t n) { std::memcpy(static_cast<char*>(dst) + done, at, n); });
}

FAKE_CU cuMemAddressReserve(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr, unsigned long long) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuMemAddressReserve")) return r;
  if (!size || size % kGranule) return broke(d, CUDA_ERROR_INVALID_VALUE);
  const std::size_t align = std::max(alignment, kGranule);
  *ptr = round_up(d.next_va, align);
  d.next_va = *ptr + size + kGranule;  // a gap: ranges never touch
  d.ranges[*ptr] = size;
  return CUDA_SUCCESS;
}
FAKE_CU cuMemAddressFree(CUdeviceptr ptr, std::size_t size) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  auto it = d.ranges.find(ptr);
  if (it == d.ranges.end() || it->second != size) return broke(d, CUDA_ERROR_INVALID_VALUE);
  auto m = d.mappings.lower_bound(ptr);
  if (m != d.mappings.end() && m->first < ptr + size) return broke(d, CUDA_ERROR_INVALID_VALUE);  // still mapped
  d.ranges.erase(it);
  return CUDA_SUCCESS;
}
FAKE_CU cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop, unsigned long long) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuMemCreate")) return r;
  if (!size || size % kGranule || !prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 || prop->location.id >= d.devices)
    return broke(d, CUDA_ERROR_INVALID_VALUE);
  if (prop->requestedHandleTypes != 0 && prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    return broke(d, CUDA_ERROR_NOT_SUPPORTED);
  if (d.counts.used_bytes + size > d.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = memfd_create("gpumem-fake-cuda", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, off_t(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* mem = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mem == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *handle = d.next_handle++;
  d.physical[*handle] = Physical{size, fd, static_cast<char*>(mem), 0, false, true, prop->requestedHandleTypes != 0};
  d.counts.used_bytes += size;
  ++d.counts.creates;
  return CUDA_SUCCESS;
}
FAKE_CU cuMemRelease(CUmemGenericAllocationHandle handle) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  auto it = d.physical.find(handle);
  if (it == d.physical.end() || it->second.released) return broke(d, kInvalidHandle);
  it->second.released = true;  // the memory goes with its last mapping
  free_if_unused(d, handle);
  return CUDA_SUCCESS;
}
FAKE_CU cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle, unsigned long long) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuMemMap")) return r;
  auto it = d.physical.find(handle);
  if (it == d.physical.end() || it->second.released) return broke(d, kInvalidHandle);
  if (offset) return broke(d, CUDA_ERROR_NOT_SUPPORTED);  // as current drivers
  if (size != it->second.size || ptr % kGranule) return broke(d, CUDA_ERROR_INVALID_VALUE);
  auto r = d.ranges.upper_bound(ptr);
  if (r == d.ranges.begin() || ptr + size > std::prev(r)->first + std::prev(r)->second)
    return broke(d, CUDA_ERROR_INVALID_VALUE);  // outside every reserved range
  auto next = d.mappings.lower_bound(ptr);
  if (next != d.mappings.end() && next->first < ptr + size) return broke(d, kAlreadyMapped);
  if (next != d.mappings.begin() && std::prev(next)->first + std::prev(next)->second.size > ptr) return broke(d, kAlreadyMapped);
  d.mappings[ptr] = Mapping{size, handle, false};
  ++it->second.mappings;
  ++d.counts.maps;
  return CUDA_SUCCESS;
}
FAKE_CU cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  auto first = whole_mappings(d, ptr, size);
  if (first == d.mappings.end()) return broke(d, kNotMapped);
  while (first != d.mappings.end() && first->first < ptr + size) {
    const CUmemGenericAllocationHandle h = first->second.handle;
    --d.physical.at(h).mappings;
    first = d.mappings.erase(first);
    free_if_unused(d, h);
    ++d.counts.unmaps;
  }
  return CUDA_SUCCESS;
}
FAKE_CU cuMemSetAccess(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc, std::size_t count) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuMemSetAccess")) return r;
  if (!desc || !count) return broke(d, CUDA_ERROR_INVALID_VALUE);
  for (std::size_t i = 0; i < count; ++i)
    if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 || desc[i].location.id >= d.devices ||
        desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
      return broke(d, CUDA_ERROR_INVALID_VALUE);
  auto first = whole_mappings(d, ptr, size);
  if (first == d.mappings.end()) return broke(d, CUDA_ERROR_INVALID_VALUE);
  for (; first != d.mappings.end() && first->first < ptr + size; ++first) first->second.access = true;
  ++d.counts.set_access;
  return CUDA_SUCCESS;
}
FAKE_CU cuMemGetAllocationGranularity(std::size_t* granularity, const CUmemAllocationProp*, int) {
  return *granularity = kGranule, CUDA_SUCCESS;
}
FAKE_CU cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle, int type, unsigned long long) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  auto it = d.physical.find(handle);
  if (it == d.physical.end() || it->second.released) return broke(d, kInvalidHandle);
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !it->second.exportable) return broke(d, CUDA_ERROR_INVALID_VALUE);
  *static_cast<int*>(shareable) = dup(it->second.fd);
  return CUDA_SUCCESS;
}
FAKE_CU cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle, int type) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  const int fd = int(reinterpret_cast<std::intptr_t>(os_handle));
  struct stat st {};
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fstat(fd, &st) != 0 || st.st_size <= 0 ||
      std::size_t(st.st_size) % kGranule)
    return broke(d, CUDA_ERROR_INVALID_VALUE);
  const int own = dup(fd);
  void* mem = mmap(nullptr, std::size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (own < 0 || mem == MAP_FAILED) {
    if (own >= 0) close(own);
    return broke(d, CUDA_ERROR_INVALID_VALUE);
  }
  *handle = d.next_handle++;
  d.physical[*handle] = Physical{std::size_t(st.st_size), own, static_cast<char*>(mem), 0, false, false, true};
  return CUDA_SUCCESS;
}

FAKE_CU cuEventCreate(CUevent* e, unsigned) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuEventCreate")) return r;
  if (!has_context()) return broke(d, kInvalidContext);
  *e = new CUevent_st;
  (*e)->context = current;
  d.events.insert(*e);
  ++d.counts.events;
  return CUDA_SUCCESS;
}
FAKE_CU cuEventDestroy_v2(CUevent e) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!d.events.erase(e)) return broke(d, kInvalidHandle);
  delete e;
  --d.counts.events;
  return CUDA_SUCCESS;
}
FAKE_CU cuEventRecord(CUevent e, CUstream stream) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (CUresult r = injected(d, "cuEventRecord")) return r;
  if (!has_context()) return broke(d, kInvalidContext);
  if (!d.events.count(e)) return broke(d, kInvalidHandle);
  if (d.streams.count(stream) && e->context != &d.contexts[stream->device]) return broke(d, kInvalidHandle);
  e->done = !d.hold_work;
  e->stream = stream;
  return CUDA_SUCCESS;
}
FAKE_CU cuEventQuery(CUevent e) {
  FakeDriver& d = the();
  std::lock_guard lock(d.mutex);
  if (!d.events.count(e)) return broke(d, kInvalidHandle);
  return e->done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
FAKE_CU cuThreadExchangeStreamCaptureMode(int* mode) {
  std::swap(capture_mode, *mode);
  return CUDA_SUCCESS;
}
