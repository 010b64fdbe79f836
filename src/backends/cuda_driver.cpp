#include "backends/cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "gpumem/errors.hpp"

namespace gpumem::cuda {
namespace {

struct Loaded {
  Driver table{};
  std::string error;  // empty when the driver loaded and initialised
};

template <typename Fn>
bool bind(void* lib, Fn*& slot, const char* symbol, std::string& error) {
  slot = reinterpret_cast<Fn*>(dlsym(lib, symbol));
  if (!slot && error.empty())
    error = std::string("the CUDA driver library lacks ") + symbol + " (gpumem needs a driver for CUDA 11 or newer)";
  return slot != nullptr;
}

Loaded load(const char* path) {
  Loaded out;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    out.error = std::string("the CUDA driver (") + path +
                ") could not be loaded: no NVIDIA driver is installed or visible to this process";
    return out;
  }
  Driver& d = out.table;
  std::string& e = out.error;
  // Versioned names are the ones cuda.h's macros select for 64-bit builds.
  bind(lib, d.cuInit, "cuInit", e);
  bind(lib, d.cuDriverGetVersion, "cuDriverGetVersion", e);
  bind(lib, d.cuGetErrorString, "cuGetErrorString", e);
  bind(lib, d.cuGetErrorName, "cuGetErrorName", e);
  bind(lib, d.cuDeviceGetCount, "cuDeviceGetCount", e);
  bind(lib, d.cuDeviceGet, "cuDeviceGet", e);
  bind(lib, d.cuDeviceGetName, "cuDeviceGetName", e);
  bind(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", e);
  bind(lib, d.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer", e);
  bind(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", e);
  bind(lib, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", e);
  bind(lib, d.cuCtxGetCurrent, "cuCtxGetCurrent", e);
  bind(lib, d.cuCtxSetCurrent, "cuCtxSetCurrent", e);
  bind(lib, d.cuCtxSynchronize, "cuCtxSynchronize", e);
  bind(lib, d.cuStreamSynchronize, "cuStreamSynchronize", e);
  bind(lib, d.cuStreamCreate, "cuStreamCreate", e);
  bind(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", e);
  bind(lib, d.cuMemGetInfo, "cuMemGetInfo_v2", e);
  bind(lib, d.cuMemAlloc, "cuMemAlloc_v2", e);
  bind(lib, d.cuMemFree, "cuMemFree_v2", e);
  bind(lib, d.cuMemcpyHtoD, "cuMemcpyHtoD_v2", e);
  bind(lib, d.cuMemcpyDtoH, "cuMemcpyDtoH_v2", e);
  bind(lib, d.cuMemAddressReserve, "cuMemAddressReserve", e);
  bind(lib, d.cuMemAddressFree, "cuMemAddressFree", e);
  bind(lib, d.cuMemCreate, "cuMemCreate", e);
  bind(lib, d.cuMemRelease, "cuMemRelease", e);
  bind(lib, d.cuMemMap, "cuMemMap", e);
  bind(lib, d.cuMemUnmap, "cuMemUnmap", e);
  bind(lib, d.cuMemSetAccess, "cuMemSetAccess", e);
  bind(lib, d.cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", e);
  bind(lib, d.cuMemExportToShareableHandle, "cuMemExportToShareableHandle", e);
  bind(lib, d.cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle", e);
  bind(lib, d.cuEventCreate, "cuEventCreate", e);
  bind(lib, d.cuEventDestroy, "cuEventDestroy_v2", e);
  bind(lib, d.cuEventRecord, "cuEventRecord", e);
  bind(lib, d.cuEventQuery, "cuEventQuery", e);
  bind(lib, d.cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", e);
  d.cuStreamGetCtx = reinterpret_cast<decltype(d.cuStreamGetCtx)>(dlsym(lib, "cuStreamGetCtx"));
  if (!e.empty()) return out;  // the library stays loaded: unloading a driver mid-process is never safe

  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    std::string code = d.cuGetErrorName(r, &name) == CUDA_SUCCESS && name ? name : "error " + std::to_string(r);
    if (r == CUDA_ERROR_NO_DEVICE)
      e = "the CUDA driver is installed but sees no GPU (cuInit: CUDA_ERROR_NO_DEVICE)";
    else if (r == CUDA_ERROR_STUB_LIBRARY)
      e = std::string("the CUDA driver library found (") + path +
          ") is the toolkit's link stub, not an NVIDIA driver (cuInit: CUDA_ERROR_STUB_LIBRARY)";
    else
      e = std::string("the CUDA driver failed to initialise (cuInit: ") + code + ")";
  }
  return out;
}

const Loaded& loaded() {
  static const Loaded instance = [] {
    const char* override_path = std::getenv("GPUMEM_LIBCUDA");
    return load(override_path && *override_path ? override_path : "libcuda.so.1");
  }();
  return instance;
}

}  // namespace

const Driver& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw BackendUnavailableError(l.error);
  return l.table;
}

std::string probe_driver(const char* path) { return load(path).error; }

std::string describe(CUresult result) {
  const Loaded& l = loaded();
  const char* name = nullptr;
  const char* text = nullptr;
  if (l.table.cuGetErrorName) l.table.cuGetErrorName(result, &name);
  if (l.table.cuGetErrorString) l.table.cuGetErrorString(result, &text);
  std::string out = name ? name : "CUDA error " + std::to_string(result);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  std::string message = std::string("CUDA driver call ") + what + " failed: " + describe(result);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) throw OutOfMemoryError(message);
  throw BackendError(message);
}

ContextGuard::ContextGuard(CUcontext ctx) {
  const Driver& d = driver();
  if (d.cuCtxGetCurrent(&previous_) != CUDA_SUCCESS) previous_ = nullptr;
  if (previous_ != ctx) {
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    switched_ = true;
  }
}

ContextGuard::~ContextGuard() {
  if (switched_) driver().cuCtxSetCurrent(previous_);
}

ContextGuardNoThrow::ContextGuardNoThrow(CUcontext ctx) noexcept {
  try {
    const Driver& d = driver();
    if (d.cuCtxGetCurrent(&previous_) == CUDA_SUCCESS && previous_ != ctx) switched_ = d.cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
  } catch (...) {  // no driver: nothing to switch
  }
}

ContextGuardNoThrow::~ContextGuardNoThrow() {
  if (switched_) driver().cuCtxSetCurrent(previous_);
}

}  // namespace gpumem::cuda
