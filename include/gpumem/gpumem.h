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

/* The text by which an out-of-memory message is recognised when it is not c10::OutOfMemoryError. */
#define GPUMEM_OOM_MARKER "gpumem: out of memory"
const char* gpumem_oom_marker(void);
/* 1 when gpumem_malloc's out-of-memory is a c10::OutOfMemoryError (PyTorch's libc10 is loaded), else 0. */
int gpumem_torch_oom_available(void);
/* Called by gpumem_malloc and gpumem_allocate on each out of memory, before they fail, on the allocating thread (like
 * torch._C._cuda_attach_out_of_memory_observer's observers, with PyTorch's arguments: device_allowed is the
 * process's limit on the device, or the device's total memory without one). NULL removes it; one at a time. */
typedef void (*gpumem_oom_observer_fn)(int device, size_t requested, size_t device_allowed, size_t device_free);
int gpumem_set_oom_observer(gpumem_oom_observer_fn observer);

/* CUDAPluggableAllocator entry points (torch.cuda.memory.CUDAPluggableAllocator and its set_*_fn hooks).
 * gpumem_malloc and gpumem_set_memory_fraction report failure by throwing a C++ exception derived from
 * std::exception: a NULL from malloc would crash PyTorch later. Out of memory in gpumem_malloc throws
 * PyTorch's own c10::OutOfMemoryError when libc10 is loaded (Python sees torch.OutOfMemoryError), else an
 * exception whose message contains GPUMEM_OOM_MARKER (Python sees a RuntimeError); anything else becomes a
 * RuntimeError. C and ctypes callers use the status-code functions below instead. */
void* gpumem_malloc(ssize_t size, int device, void* stream);
void gpumem_free(void* ptr, size_t size, int device, void* stream);
void gpumem_empty_cache(void);
void gpumem_set_memory_fraction(double fraction, int device);
void gpumem_record_stream(void* ptr, void* stream);
void gpumem_init(int device_count);
void gpumem_reset(void);
/* set_base_alloc_fn: the start of the live block holding ptr (ptr may point inside it) and, in *size, its
 * usable bytes. For a pointer no gpumem allocator handed out: ptr itself and *size = 0. */
void* gpumem_base_alloc(void* ptr, size_t* size);

/* Allocation with status codes. */
int gpumem_allocate(size_t size, int device, void* stream, void** out);
int gpumem_deallocate(void* ptr, int device, void* stream);
int gpumem_set_limit(size_t bytes, int device);
int gpumem_set_fraction(double fraction, int device);
/* The fraction last set (exactly), else limit / total, else 1.0 (torch.cuda.get_per_process_memory_fraction). */
int gpumem_get_fraction(int device, double* fraction);
/* Zeroes the "allocated" / "freed" counters and num_ooms & co. (torch.cuda.reset_accumulated_memory_stats). */
int gpumem_reset_accumulated_memory_stats(int device);
/* The largest block an allocation could get now without failing: the largest cached free block, or the
 * device's free memory within the limit (what PyTorch's cacheInfo gives cuDNN as its workspace bound). */
int gpumem_cache_info(int device, size_t* largest_block);
/* Makes PyTorch's CUDAPluggableAllocator answer cacheInfo() (cuDNN benchmark's workspace bound) with
 * gpumem_cache_info instead of an error, by pointing its vtable slot at gpumem (no hook exists). Returns 1
 * when done (or done before), 0 when libtorch_cuda's method or its slot was not found (nothing changed). */
int gpumem_torch_enable_cache_info(void);
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

/* Private pools (torch.cuda.MemPool, CUDA graph trees). CUDA graph captures reach gpumem through PyTorch's
 * pool hooks, which take C++ types and are declared in src/api/torch_hooks.hpp. A pool is PyTorch's
 * MempoolId_t (a, b). incref/release count its users; live_blocks writes up to cap addresses of the blocks the
 * program holds in it and returns how many there are. A checkpoint is a numbered copy of the pool's
 * allocated blocks; restore makes the pool's allocated blocks exactly those again, writes the addresses it
 * had to allocate, and returns their count. Negative returns are GPUMEM_E* codes. */
int gpumem_pool_incref(int device, unsigned long long a, unsigned long long b);
int gpumem_pool_release(int device, unsigned long long a, unsigned long long b);
int gpumem_pool_use_count(int device, unsigned long long a, unsigned long long b);
/* MemPool(use_on_oom=True): an allocation outside every pool that would run out of memory takes a cached free
 * block of this pool (on its stream) instead. GPUMEM_E_INVALID for a pool not in use. */
int gpumem_pool_set_use_on_oom(int device, unsigned long long a, unsigned long long b, int on);
long gpumem_pool_live_blocks(int device, unsigned long long a, unsigned long long b, uintptr_t* out, size_t cap);
long gpumem_pool_checkpoint(int device, unsigned long long a, unsigned long long b);
long gpumem_pool_restore(long handle, uintptr_t* out, size_t cap);
int gpumem_pool_checkpoint_free(long handle);
/* 1 once `gpumem stop PID` asked this process to stop (it then also gets SIGINT), else 0: a SIGINT handler
 * can tell a stop request from Ctrl-C. */
int gpumem_stop_requested(void);
/* CUDA IPC: sharing an allocation with another process (torch.multiprocessing does it through
 * gpumem_torch). gpumem_ipc_export describes the live allocation starting at ptr as JSON in buf (same
 * buffer rules as gpumem_memory_summary), naming new file descriptors that belong to the caller: send them
 * over a Unix socket (SCM_RIGHTS) and close them. If buf is too small the descriptors are closed again and
 * the needed length returned: call again with room. The exporter keeps the allocation alive while the
 * receiver uses it. gpumem_ipc_open maps such a description, with the receiver's descriptor numbers (it
 * duplicates them; close yours), and gives its address in this process; gpumem_ipc_close lets it go. */
int gpumem_ipc_export(void* ptr, char* buf, size_t len);
int gpumem_ipc_open(int device, const char* description, void** out);
int gpumem_ipc_close(void* ptr);

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
