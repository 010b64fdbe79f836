// The control server inside a gpumem process: a background thread that answers requests on the
// process's socket (protocol.hpp) about its default allocators. src/api starts it with the first
// allocator; the allocation path never touches it.
//
// Contract:
//  - start_server() is idempotent and thread-safe; it returns false (and says why in `why`) when the
//    channel is off (GPUMEM_CONTROL=0) or cannot be set up. It never throws.
//  - The thread answers one connection at a time, each bounded by a 2 s deadline (a snapshot's transfer:
//    2 s without progress, 5 minutes in all); peers of another uid (except root) get an error answer and
//    nothing else. Exceptions in handlers become error answers.
//  - The socket is unlinked at normal exit.
//  - stop: sets stop_requested(), releases every device's cache, then sends SIGINT to the process (Python's
//    main thread raises KeyboardInterrupt, or runs the shim's on_stop handler).
//  - snapshot: the snapshot is taken (plain data, under the allocators' locks), then rendered straight into
//    the socket in chunks without a lock, so the document is never in memory whole. A client that takes
//    no chunk for 2 s, or a transfer past 5 minutes, ends the connection; the program goes on.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"
#include "report/torch_snapshot.hpp"

namespace gpumem::control {

struct ServedDevice {
  int index = 0;
  Allocator* allocator = nullptr;
  std::string device_key;  // names the physical device across processes ("" when not shareable)
};

struct PendingLimit {
  std::optional<std::uint64_t> bytes;  // 0: none
  std::optional<double> fraction;
};

struct ServerHooks {
  std::function<std::vector<ServedDevice>()> devices;  // the allocators that exist now
  // A limit on a device the program has not used yet is kept and applied when it first does: making an
  // allocator there would open a CUDA context on that GPU. False when the device has one by now (the
  // limit is then set as on any served device); throws std::invalid_argument for a device out of range.
  std::function<bool(int, const PendingLimit&)> limit_unmade;
};

// Where snapshots come from. Unset: the served devices' allocator snapshots, with no history. The memory
// history (src/report) sets one that adds its trace entries and frames. Thread-safe.
using SnapshotSource = std::function<report::TorchSnapshotInput()>;
void set_snapshot_source(SnapshotSource source);

bool start_server(ServerHooks hooks, std::string& why);
bool server_running();
std::string server_socket_path();  // "" when not running
bool stop_requested();

// The answer to one request body, as the server gives it (for tests and the fuzzer). `is_stop` is set
// when the request was a valid stop (the caller then signals the process; this function does not). For
// a snapshot it is the head answer only: the document itself goes over a connection (serve_connection).
std::string handle_request_body(const std::string& body, const ServerHooks& hooks, bool* is_stop = nullptr);

// Serves one accepted connection as the server thread does (peer check, one request, its answer); for
// tests over a socketpair. Never throws.
void serve_connection(int fd, const ServerHooks& hooks);

}  // namespace gpumem::control
