// The control server inside a gpumem process: a background thread that answers requests on the
// process's socket (protocol.hpp) about its default allocators. src/api starts it with the first
// allocator; the allocation path never touches it.
//
// Contract:
//  - start_server() is idempotent and thread-safe; it returns false (and says why in `why`) when the
//    channel is off (GPUMEM_CONTROL=0) or cannot be set up. It never throws.
//  - The thread answers one connection at a time, each bounded by a 2 s deadline; peers of another uid
//    (except root) get an error answer and nothing else. Exceptions in handlers become error answers.
//  - The socket is unlinked at normal exit.
//  - stop: sets stop_requested(), releases every device's cache, then sends SIGINT to the process (Python's
//    main thread raises KeyboardInterrupt, or runs the shim's on_stop handler).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "gpumem/allocator.hpp"

namespace gpumem::control {

struct ServedDevice {
  int index = 0;
  Allocator* allocator = nullptr;
  std::string device_key;  // names the physical device across processes ("" when not shareable)
};

struct ServerHooks {
  std::function<std::vector<ServedDevice>()> devices;  // the allocators that exist now
  std::function<Allocator&(int)> make_device;          // limit on a device not made yet makes it
};

bool start_server(ServerHooks hooks, std::string& why);
bool server_running();
std::string server_socket_path();  // "" when not running
bool stop_requested();

// The answer to one request body, as the server gives it (for tests and the fuzzer). `is_stop` is set
// when the request was a valid stop (the caller then signals the process; this function does not).
std::string handle_request_body(const std::string& body, const ServerHooks& hooks, bool* is_stop = nullptr);

}  // namespace gpumem::control
