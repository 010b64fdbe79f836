// The few CUDA driver API entry points gpumem calls, loaded at run time from libcuda.so.1 (no cuda.h,
// no link-time dependency). Types and constants below are gpumem's own declarations of the driver's
// ABI (CUDA 12/13, 64-bit Linux); only what the CUDA backends use is declared.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpumem::cuda {

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;
using CUmemGenericAllocationHandle = unsigned long long;

inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_DEINITIALIZED = 4;
inline constexpr CUresult CUDA_ERROR_STUB_LIBRARY = 34;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_NOT_READY = 600;
inline constexpr CUresult CUDA_ERROR_NOT_SUPPORTED = 801;

// CUmemLocation / CUmemAllocationProp / CUmemAccessDesc, laid out as in the driver's header.
struct CUmemLocation {
  int type;  // CU_MEM_LOCATION_TYPE_DEVICE = 1
  int id;
};
struct CUmemAllocationProp {
  int type;                  // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requestedHandleTypes;  // CU_MEM_HANDLE_TYPE_NONE = 0
  CUmemLocation location;
  void* win32HandleMetaData;
  struct {
    unsigned char compressionType;
    unsigned char gpuDirectRDMACapable;
    unsigned short usage;
    unsigned char reserved[4];
  } allocFlags;
};
static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp must match the driver's layout");
struct CUmemAccessDesc {
  CUmemLocation location;
  int flags;  // CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
};
static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc must match the driver's layout");

inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 1;
inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 1;
inline constexpr int CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0;
inline constexpr int CU_MEM_ALLOC_GRANULARITY_RECOMMENDED = 1;
inline constexpr int CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1;
inline constexpr int CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// Function table. Every pointer is non-null once driver() returned.
struct Driver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuGetErrorString)(CUresult, const char** str);
  CUresult (*cuGetErrorName)(CUresult, const char** str);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int len, CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, CUdevice device);
  CUresult (*cuDeviceCanAccessPeer)(int* can_access, CUdevice device, CUdevice peer);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* ctx, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*cuCtxGetCurrent)(CUcontext* ctx);
  CUresult (*cuCtxSetCurrent)(CUcontext ctx);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuMemGetInfo)(std::size_t* free, std::size_t* total);
  CUresult (*cuMemAlloc)(CUdeviceptr* ptr, std::size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr ptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, std::size_t bytes);
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, std::size_t bytes);
  CUresult (*cuMemAddressReserve)(CUdeviceptr* ptr, std::size_t size, std::size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags);
  CUresult (*cuMemAddressFree)(CUdeviceptr ptr, std::size_t size);
  CUresult (*cuMemCreate)(CUmemGenericAllocationHandle* handle, std::size_t size, const CUmemAllocationProp* prop,
                          unsigned long long flags);
  CUresult (*cuMemRelease)(CUmemGenericAllocationHandle handle);
  CUresult (*cuMemMap)(CUdeviceptr ptr, std::size_t size, std::size_t offset, CUmemGenericAllocationHandle handle,
                       unsigned long long flags);
  CUresult (*cuMemUnmap)(CUdeviceptr ptr, std::size_t size);
  CUresult (*cuMemSetAccess)(CUdeviceptr ptr, std::size_t size, const CUmemAccessDesc* desc, std::size_t count);
  CUresult (*cuMemGetAllocationGranularity)(std::size_t* granularity, const CUmemAllocationProp* prop, int option);
  CUresult (*cuMemExportToShareableHandle)(void* shareable, CUmemGenericAllocationHandle handle, int type,
                                           unsigned long long flags);
  CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle* handle, void* os_handle, int type);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventQuery)(CUevent event);
  CUresult (*cuThreadExchangeStreamCaptureMode)(int* mode);
  // Optional (nullptr when the driver lacks it).
  CUresult (*cuStreamGetCtx)(CUstream stream, CUcontext* ctx);
};

// Loads libcuda.so.1 (or $GPUMEM_LIBCUDA) once and calls cuInit(0). Throws BackendUnavailableError with
// one sentence when the library, a symbol, or a usable device is missing; later calls rethrow the same.
const Driver& driver();

// Loads the driver from `path` without caching it; returns why it is unusable, or "" when it works. For tests.
std::string probe_driver(const char* path);

// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)" for a result code.
std::string describe(CUresult result);

// Throws OutOfMemoryError for CUDA_ERROR_OUT_OF_MEMORY, BackendError otherwise; `what` names the call.
void check(CUresult result, const char* what);

// Makes a context current on this thread for the guard's lifetime, then restores the previous one.
class ContextGuard {
 public:
  explicit ContextGuard(CUcontext ctx);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// The same for noexcept paths: switches when it can, silently does nothing when it cannot.
class ContextGuardNoThrow {
 public:
  explicit ContextGuardNoThrow(CUcontext ctx) noexcept;
  ~ContextGuardNoThrow();
  ContextGuardNoThrow(const ContextGuardNoThrow&) = delete;
  ContextGuardNoThrow& operator=(const ContextGuardNoThrow&) = delete;

 private:
  CUcontext previous_ = nullptr;
  bool switched_ = false;
};

}  // namespace gpumem::cuda
