/* gpumem C ABI, memory history and snapshots (torch.cuda.memory._record_memory_history, _snapshot,
 * _dump_snapshot). Same conventions as gpumem.h: 0 on success, a negative GPUMEM_E* code on failure with
 * gpumem_last_error() saying why. Snapshots are PyTorch's format: the dict _snapshot() returns, pickled. */
#ifndef GPUMEM_GPUMEM_HISTORY_H
#define GPUMEM_GPUMEM_HISTORY_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called on the allocating thread before each allocation while stacks are recorded, outside the
 * allocator's locks; it may call gpumem_history_set_frames. */
typedef void (*gpumem_frame_source)(void);

/* Starts (or restarts with new settings) recording every default allocator's events: the last
 * max_entries per device when context is non-zero; frames through `source` when stacks is non-zero. */
int gpumem_history_start(size_t max_entries, int context, int stacks, gpumem_frame_source source);
int gpumem_history_stop(void);
int gpumem_history_clear(void);
/* Frames for the calling thread's next allocation, innermost first: records separated by '\x1e', fields
 * (filename, line, function name) by '\x1f'. */
int gpumem_history_set_frames(const char* packed);
/* Writes the snapshot pickle to path (created or truncated). */
int gpumem_snapshot_write(const char* path);
/* The snapshot pickle in a buffer the caller releases with gpumem_buffer_free; *len gets its size.
 * NULL on failure. */
void* gpumem_snapshot_pickle(size_t* len);
void gpumem_buffer_free(void* buffer);

#ifdef __cplusplus
}
#endif
#endif
