// CUDA IPC under the C ABI (gpumem_ipc_export / _open / _close in gpumem.h).
//
// Contract: ipc_export(ptr) describes a live allocation of a default allocator as JSON
// {"offset", "bytes", "pieces": [{"fds": [...], "chunk_bytes", "offset", "bytes"}]}; the descriptors are
// new and belong to the caller (send them with SCM_RIGHTS, then close them). The exporting process keeps
// the allocation alive while a receiver uses it. ipc_open(device, json) maps such a description (with the
// receiver's descriptor numbers; it duplicates them, the caller closes its own) into this process and
// returns the allocation's address here; ipc_close(ptr) waits for the device, unmaps and lets go. Imports
// use a backend of their own per device, never the allocator's, so they need none of the engine's locks.
// Errors: std::invalid_argument for a malformed description or an unknown pointer, BackendError when the
// backend cannot share or import.
#pragma once
#include <string>
#include <vector>

namespace gpumem::api {

struct ExportedAllocation {
  std::string json;
  std::vector<int> fds;  // every descriptor named in json, for closing on failure
};
ExportedAllocation ipc_export(const void* ptr);
void* ipc_open(int device, const std::string& json);
void ipc_close(void* ptr);
std::size_t ipc_open_count();

}  // namespace gpumem::api
