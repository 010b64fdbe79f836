/* gpumem C ABI: the default allocators (see gpumem/memory.hpp) for C, ctypes and PyTorch.
 * Every function returning int gives 0 on success and a negative GPUMEM_E* code on failure;
 * gpumem_last_error() then holds one sentence about the calling thread's last failure. */
#ifndef GPUMEM_GPUMEM_H
#define GPUMEM_GPUMEM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUMEM_OK 0
#define GPUMEM_E_OOM (-1)           /* out of memory (after releasing the cache) */
#define GPUMEM_E_INVALID (-2)       /* bad argument: unknown pointer, fraction outside (0, 1], ... */
#define GPUMEM_E_BACKEND (-3)       /* the driver or backend failed or is unavailable */
#define GPUMEM_E_INTERNAL (-4)

const char* gpumem_version(void);
const char* gpumem_last_error(void);

/* CUDAPluggableAllocator entry points (torch.cuda.memory.CUDAPluggableAllocator and its set_*_fn hooks).
 * gpumem_malloc and gpumem_set_memory_fraction report failure by throwing a C++ exception derived from
 * std::exception (PyTorch turns it into a Python RuntimeError): a NULL from malloc would crash PyTorch later.
 * C and ctypes callers use the status-code functions below instead. */
void* gpumem_malloc(ssize_t size, int device, void* stream);
void gpumem_free(void* ptr, size_t size, int device, void* stream);
void gpumem_empty_cache(void);
void gpumem_set_memory_fraction(double fraction, int device);
void gpumem_record_stream(void* ptr, void* stream);
void gpumem_init(int device_count);
void gpumem_reset(void);
/* set_base_alloc_fn: the start of the block holding ptr and, in *size, its usable bytes. */
void* gpumem_base_alloc(void* ptr, size_t* size);

/* Allocation with status codes. */
int gpumem_allocate(size_t size, int device, void* stream, void** out);
int gpumem_deallocate(void* ptr, int device, void* stream);
int gpumem_set_limit(size_t bytes, int device);
int gpumem_set_fraction(double fraction, int device);
int gpumem_record_stream_checked(void* ptr, void* stream);
int gpumem_empty_cache_checked(void);
int gpumem_set_current_device(int device);
/* Name of the backend of a device's allocator ("cuda", "host", ...), made if needed; same buffer rules as
 * gpumem_memory_summary. */
int gpumem_backend_name(int device, char* buf, size_t len);

/* Allocation trace (gpumem-trace format, ".gz" compresses) of every gpumem_malloc / gpumem_free and
 * gpumem_allocate / gpumem_deallocate from now on, for `gpumem replay`. GPUMEM_TRACE=FILE in the
 * environment starts one at the first allocation. gpumem_trace_stop returns the number of events written
 * (or a negative error code); the file is also finished at normal process exit. */
int gpumem_trace_start(const char* path);
long gpumem_trace_stop(void);

/* 1 once `gpumem stop PID` asked this process to stop (it then also gets SIGINT), else 0: a SIGINT handler
 * can tell a stop request from Ctrl-C. */
int gpumem_stop_requested(void);

/* torch.cuda-style queries; device -1 means current. */
size_t gpumem_memory_allocated(int device);
size_t gpumem_memory_reserved(int device);
size_t gpumem_max_memory_allocated(int device);
size_t gpumem_max_memory_reserved(int device);
int gpumem_reset_peak_memory_stats(int device);
int gpumem_mem_get_info(int device, size_t* free_bytes, size_t* total_bytes);
/* Writes a NUL-terminated JSON object of memory_stats() (or the summary table) into buf; returns the
 * length it needs, excluding the NUL, or a negative error code. */
int gpumem_memory_stats_json(int device, char* buf, size_t len);
int gpumem_memory_summary(int device, char* buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
