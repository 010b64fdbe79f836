/* libgpumem_monitor.so: one sample of every GPU and its processes, as the JSON document that
 * `gpumem --json --full` prints (one schema: keys in src/tui/sample_json.hpp), read in the caller's process.
 * For Python's ctypes (gpumem.gpus()) and any C program; it needs no compiler on the user's machine.
 *
 * Contract:
 *  - gpumem_monitor_sample_json() reads NVML (libnvidia-ml.so.1, or $GPUMEM_NVML_LIBRARY, dlopen'ed on the
 *    first call, never linked), /proc, and with GPUMEM_MONITOR_ALLOCATORS the control channel of gpumem
 *    processes. NVML stays open between calls and names, UUIDs and bus ids are read once, so a repeated
 *    sample costs the NVML calls of the fields only. Calls from several threads are serialised.
 *  - It returns GPUMEM_MONITOR_OK with *out_json a NUL-terminated document of *out_len bytes, or another
 *    status with *out_json one sentence saying why (NULL only when even that could not be allocated).
 *    Either way the caller frees *out_json with gpumem_monitor_free(). A GPU that cannot be read, or a
 *    field a GPU does not support, is in the document (error / null), never a failed call.
 *  - A failed NVML open is not remembered: the next call tries again. gpumem_monitor_reset() drops the
 *    open NVML and every cache, so the next call opens NVML afresh (after a driver reload; tests).
 *  - Nothing here throws or aborts; no symbol but gpumem_monitor_* is exported.
 */
#ifndef GPUMEM_MONITOR_H
#define GPUMEM_MONITOR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUMEM_MONITOR_ABI_VERSION 1

/* flags */
#define GPUMEM_MONITOR_PROCESSES 1  /* each GPU's processes (NVML lists, user/command/container from /proc) */
#define GPUMEM_MONITOR_ALLOCATORS 2 /* + allocated/reserved/peak of gpumem processes (control channel) */
#define GPUMEM_MONITOR_HOLDERS 4    /* + processes holding /dev/nvidiaN without a context (scans every fd table) */
#define GPUMEM_MONITOR_EXTRAS 8     /* + memory temperature, energy, PCIe replays, engine utilizations, BAR1, ECC
                                       (10 more NVML calls per GPU; null when not asked for) */

/* statuses: the CLI's exit codes for the same cases */
#define GPUMEM_MONITOR_OK 0
#define GPUMEM_MONITOR_FAILED 1       /* anything else (out of host memory) */
#define GPUMEM_MONITOR_BAD_ARGUMENT 2 /* NULL out pointers or unknown flags */
#define GPUMEM_MONITOR_NO_DEVICE 4    /* NVML missing or not initialisable (no driver), or no GPU */

int gpumem_monitor_abi_version(void);
int gpumem_monitor_sample_json(int flags, char** out_json, size_t* out_len);
void gpumem_monitor_free(char* text);
void gpumem_monitor_reset(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUMEM_MONITOR_H */
