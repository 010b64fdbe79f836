// The server side of the snapshot operation (protocol.hpp): take the process's snapshot once, then render it
// straight into the connection in chunks. Internal to src/control; server.cpp dispatches to it.
#pragma once
#include <nlohmann/json.hpp>

#include "control/protocol.hpp"
#include "control/server.hpp"

namespace gpumem::control {

// The head answer a snapshot request gets (counts, or an error such as a device the process has not got),
// without sending the document: what handle_request_body answers.
nlohmann::json snapshot_head(const Request& request, const ServerHooks& hooks);

// Sends the head answer, the document's data frames, the empty frame and the trailer on `fd`. A client that
// stalls or leaves ends it quietly. Never throws.
void serve_snapshot(int fd, const Request& request, const ServerHooks& hooks) noexcept;

}  // namespace gpumem::control
