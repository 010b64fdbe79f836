// Where control sockets live and who may use them: the one place for the channel's security rules.
//
// Contract:
//  - A user's sockets are in GPUMEM_CONTROL_DIR if set (shared with containers), else
//    $XDG_RUNTIME_DIR/gpumem/, else /tmp/gpumem-<uid>/. The directory is made 0700 and must be owned by
//    that user with no group/other access, or it is not used (someone else could have planted it).
//  - Each process's socket is <dir>/<pid>.sock, mode 0600.
//  - A peer is allowed when its uid (SO_PEERCRED) equals ours or is root. Clients also check that the
//    server's pid and uid are those the socket's name and directory promise.
//  - A socket nobody listens on (made more than 2 s ago: a server listens microseconds after it binds) is
//    stale: it is unlinked by whoever finds it. Not by its pid: a process in another pid namespace
//    (a container sharing GPUMEM_CONTROL_DIR) names its socket by a pid that means another process here,
//    or none. Such a server is known by the pid SO_PEERCRED gives, in the finder's namespace.
//  - I/O uses absolute deadlines; every call that can block takes one.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gpumem::control {

using Clock = std::chrono::steady_clock;

// The socket directory for `uid` as this process would name it (not created).
std::string socket_dir_for(uid_t uid);
// Makes (if needed) and checks our own directory; returns it, or nullopt with `error` set.
std::optional<std::string> ensure_own_socket_dir(std::string& error);
// Every directory that may hold sockets: ours, and as root every user's we can find.
std::vector<std::string> candidate_socket_dirs(bool every_user);
std::string socket_path(const std::string& dir, int pid);

// Whether a caller with `peer` uid may talk to a process running as `self`.
bool peer_allowed(uid_t peer, uid_t self);

struct PeerCred {
  int pid = 0;
  uid_t uid = 0;
};
std::optional<PeerCred> peer_cred(int fd);

bool process_alive(int pid);

// What listens on the socket at `path`: `listening` with its peer (pid in our namespace), `stale` (nobody
// listens, and it is no socket or not a new one: unlinked when it lies in our own socket directory), or `unknown` (busy backlog, no access, not a
// socket we can reach). Connects and hangs up at once; the server drops such a connection.
struct SocketProbe {
  enum Kind { listening, stale, unknown } kind = unknown;
  PeerCred peer;
};
SocketProbe probe_socket(const std::string& path);

// Sends one frame / reads one frame of at most `max_bytes`; false on timeout, EOF, error or oversize
// (then `error` says which).
bool send_frame(int fd, std::string_view body, Clock::time_point deadline, std::string& error);
bool recv_frame(int fd, std::string& body, std::size_t max_bytes, Clock::time_point deadline, std::string& error);

}  // namespace gpumem::control
