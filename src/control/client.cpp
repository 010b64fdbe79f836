// Control client: find sockets, connect with checks on who answers, one framed request per connection.
#include "control/client.hpp"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "control/channel.hpp"
#include "control/protocol.hpp"
#include "gpumem/printable.hpp"

namespace gpumem::control {
namespace {

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& other) noexcept : fd(std::exchange(other.fd, -1)) {}
  Fd& operator=(Fd&&) = delete;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::string who(int pid) { return "process " + std::to_string(pid); }

// The socket of `pid` in the directories we may see, or "" (then *other_user says if one was unreadable):
// named by the pid, else (a process in a container sharing the directory names it by its pid there) the
// one whose server is `pid` here.
std::string find_socket(int pid, bool* other_user) {
  const std::vector<std::string> dirs = candidate_socket_dirs(geteuid() == 0);
  for (const std::string& dir : dirs) {
    std::string path = socket_path(dir, pid);
    struct stat st {};
    if (lstat(path.c_str(), &st) == 0) return path;
    if (errno == EACCES) *other_user = true;
  }
  for (const ProcessRef& p : list_processes(geteuid() == 0))
    if (p.pid == pid) return p.socket;
  return {};
}

[[noreturn]] void fail_unreachable(int pid, bool other_user) {
  if (!process_alive(pid)) throw ControlError(FailureKind::gone, pid, who(pid) + " does not exist (it has ended)");
  struct stat st {};
  std::string proc = "/proc/" + std::to_string(pid);
  if (other_user || (stat(proc.c_str(), &st) == 0 && st.st_uid != geteuid() && geteuid() != 0))
    throw ControlError(FailureKind::other_user, pid,
                       who(pid) + " belongs to another user; only its owner or root may control it");
  throw ControlError(FailureKind::not_gpumem, pid,
                     who(pid) + " runs no gpumem allocator with a control channel (or started it with GPUMEM_CONTROL=0)");
}

int connect_to(int pid, const std::string& path, Clock::time_point deadline) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) throw ControlError(FailureKind::no_answer, pid, std::string("cannot make a socket: ") + std::strerror(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  int err = errno;
  if (err == EAGAIN || err == EINPROGRESS) {
    // Backlog full: a busy server; wait until it accepts or the deadline passes.
    while (Clock::now() < deadline) {
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 || errno == EISCONN) return fd;
      usleep(2000);
    }
    close(fd);
    throw ControlError(FailureKind::no_answer, pid, who(pid) + " did not answer in time");
  }
  close(fd);
  if (err == EACCES || err == EPERM) fail_unreachable(pid, true);
  if (err == ECONNREFUSED || err == ENOENT) {
    probe_socket(path);  // nobody listens: removed when it is stale (probe_socket); never talked to
    fail_unreachable(pid, false);
  }
  throw ControlError(FailureKind::no_answer, pid, who(pid) + ": cannot connect: " + std::strerror(err));
}

}  // namespace

std::vector<ProcessRef> list_processes(bool every_user) {
  std::vector<ProcessRef> found;
  for (const std::string& dir : candidate_socket_dirs(every_user && geteuid() == 0)) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    struct stat dst {};
    uid_t owner = stat(dir.c_str(), &dst) == 0 ? dst.st_uid : uid_t(-1);
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      long pid = std::strtol(e->d_name, &end, 10);
      if (pid <= 0 || !end || std::strcmp(end, ".sock") != 0) continue;
      std::string path = dir + "/" + e->d_name;
      // Known by who serves it (its pid here, also for a process in a container), not by its name.
      const SocketProbe probe = probe_socket(path);
      if (probe.kind == SocketProbe::stale) continue;
      int served_by = int(pid);
      if (probe.kind == SocketProbe::listening) served_by = probe.peer.pid;
      else if (!process_alive(served_by)) continue;
      // Once each (a socket planted under another name for a process listed already).
      const bool seen = std::any_of(found.begin(), found.end(), [&](const ProcessRef& p) { return p.pid == served_by; });
      if (!seen) found.push_back({served_by, owner, path});
    }
    closedir(d);
  }
  return found;
}

namespace {

struct Connection {
  Fd fd;
  bool sent = false;
  std::string send_error;
};

// Connects to `pid`'s socket, checks who serves it, and sends the request.
Connection connect_and_send(int pid, const nlohmann::json& request, Clock::time_point deadline) {
  if (pid <= 0) throw ControlError(FailureKind::gone, pid, "process id must be positive");
  bool other_user = false;
  std::string path = find_socket(pid, &other_user);
  if (path.empty()) fail_unreachable(pid, other_user);
  Connection c{Fd(connect_to(pid, path, deadline)), false, {}};
  // Whoever listens must be the process the name promises, run by a user we trust with our requests.
  std::optional<PeerCred> peer = peer_cred(c.fd.fd);
  if (!peer || peer->pid != pid || !(peer->uid == geteuid() || geteuid() == 0 || peer->uid == 0))
    throw ControlError(FailureKind::not_gpumem, pid,
                       who(pid) + "'s socket is served by another process; it is not trusted");
  // A send that fails may still have an answer waiting (a server refuses before reading): read it anyway.
  c.sent = send_frame(c.fd.fd, to_wire(request), deadline, c.send_error);
  return c;
}

// Reads one answer frame; throws unless it is JSON with "ok": true.
nlohmann::json read_answer(int pid, Connection& c, Clock::time_point deadline, std::chrono::milliseconds timeout) {
  std::string error, body;
  if (!recv_frame(c.fd.fd, body, kMaxAnswerBytes, deadline, error)) {
    if (!c.sent) error = c.send_error;
    if (!process_alive(pid)) throw ControlError(FailureKind::gone, pid, who(pid) + " ended before it answered");
    throw ControlError(FailureKind::no_answer, pid,
                       who(pid) + " did not answer within " + std::to_string(timeout.count()) + " ms (" + error + ")");
  }
  nlohmann::json answer = nlohmann::json::parse(body, nullptr, false);
  if (answer.is_discarded() || !answer.is_object())
    throw ControlError(FailureKind::refused, pid, who(pid) + " sent an answer that is not JSON");
  if (!(answer.contains("ok") && answer["ok"].is_boolean() && answer["ok"].get<bool>())) {
    // Shown on the caller's terminal: one line, no escape codes, whatever the other side sent.
    std::string sentence = answer.contains("error") && answer["error"].is_string()
                               ? printable(answer["error"].get<std::string>().substr(0, 400))
                               : "unspecified error";
    FailureKind kind = sentence.rfind("refused: ", 0) == 0 ? FailureKind::other_user : FailureKind::refused;
    throw ControlError(kind, pid, who(pid) + " " + (kind == FailureKind::other_user ? "refused: it belongs to another user" : "answered: " + sentence));
  }
  return answer;
}

}  // namespace

nlohmann::json call(int pid, const nlohmann::json& request, std::chrono::milliseconds timeout) {
  Clock::time_point deadline = Clock::now() + timeout;
  Connection c = connect_and_send(pid, request, deadline);
  return read_answer(pid, c, deadline, timeout);
}

namespace {
Request of(Op op) {
  Request r;
  r.op = op;
  return r;
}
nlohmann::json call_op(int pid, Request r, std::chrono::milliseconds timeout) {
  return call(pid, request_json(r), timeout);
}
// Fields of an answer, read without trusting its types (any process of this user may serve the socket):
// a field of the wrong type reads as absent, never as an exception from the JSON library.
std::int64_t int_field(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return 0;
  if (j[key].is_number_unsigned()) return std::int64_t(std::min<std::uint64_t>(j[key].get<std::uint64_t>(), INT64_MAX));
  if (j[key].is_number_float()) {  // converting 1e300 to an integer is undefined: out of range reads as absent
    const double v = j[key].get<double>();
    return v >= -9.2e18 && v <= 9.2e18 ? std::int64_t(v) : 0;
  }
  return j[key].get<std::int64_t>();
}
std::string string_field(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
bool bool_field(const nlohmann::json& j, const char* key, bool otherwise) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : otherwise;
}
LimitAnswer limit_answer(const nlohmann::json& a) {
  LimitAnswer out{int_field(a, "limit_bytes"), int_field(a, "reserved_bytes"), int_field(a, "released_bytes"),
                  bool_field(a, "fits", true), bool_field(a, "pending", false)};
  if (a.contains("limit_fraction") && a["limit_fraction"].is_number()) out.fraction = a["limit_fraction"].get<double>();
  return out;
}
}  // namespace

ProcessReport stats(int pid, std::chrono::milliseconds timeout) {
  nlohmann::json a = call_op(pid, of(Op::stats), timeout);
  ProcessReport report{pid, {}};
  if (!a.contains("devices") || !a["devices"].is_array()) return report;
  for (const auto& d : a["devices"]) {
    if (!d.is_object()) continue;
    DeviceReport r;
    r.device = int(int_field(d, "device"));
    r.backend = string_field(d, "backend");
    r.device_key = string_field(d, "device_key");
    r.allocated_bytes = int_field(d, "allocated_bytes");
    r.allocated_peak_bytes = int_field(d, "allocated_peak_bytes");
    r.reserved_bytes = int_field(d, "reserved_bytes");
    r.reserved_peak_bytes = int_field(d, "reserved_peak_bytes");
    r.requested_bytes = int_field(d, "requested_bytes");
    r.requested_peak_bytes = int_field(d, "requested_peak_bytes");
    r.largest_free_bytes = int_field(d, "largest_free_bytes");
    r.num_ooms = int_field(d, "num_ooms");
    r.num_alloc_retries = int_field(d, "num_alloc_retries");
    r.limit_bytes = int_field(d, "limit_bytes");
    report.devices.push_back(std::move(r));
  }
  return report;
}

std::int64_t clear(int pid, std::chrono::milliseconds timeout) {
  return int_field(call_op(pid, of(Op::clear), timeout), "released_bytes");
}

void reset_peaks(int pid, std::chrono::milliseconds timeout) { call_op(pid, of(Op::reset), timeout); }

LimitAnswer limit_bytes(int pid, int device, std::uint64_t bytes, std::chrono::milliseconds timeout) {
  Request r = of(Op::limit);
  r.device = device;
  r.bytes = bytes;
  return limit_answer(call_op(pid, r, timeout));
}

LimitAnswer limit_fraction(int pid, int device, double fraction, std::chrono::milliseconds timeout) {
  Request r = of(Op::limit);
  r.device = device;
  r.fraction = fraction;
  return limit_answer(call_op(pid, r, timeout));
}

std::int64_t stop(int pid, std::chrono::milliseconds timeout) {
  return int_field(call_op(pid, of(Op::stop), timeout), "released_bytes");
}

std::int64_t release(int pid, const std::string& device_key, std::chrono::milliseconds timeout) {
  Request r = of(Op::release);
  r.device_key = device_key;
  return int_field(call_op(pid, r, timeout), "released_bytes");
}

SnapshotSummary snapshot(int pid, SnapshotFormat format, std::optional<int> device,
                         const std::function<void(std::string_view)>& sink, std::chrono::milliseconds timeout) {
  Request r = of(Op::snapshot);
  r.format = format;
  r.snapshot_device = device;
  Clock::time_point deadline = Clock::now() + timeout;
  Connection c = connect_and_send(pid, request_json(r), deadline);
  nlohmann::json head = read_answer(pid, c, deadline, timeout);
  SnapshotSummary summary;
  summary.format = format;
  summary.devices = int_field(head, "devices");
  summary.segments = int_field(head, "segments");
  summary.blocks = int_field(head, "blocks");
  summary.active_blocks = int_field(head, "active_blocks");
  std::string chunk, error;
  for (;;) {
    if (!recv_frame(c.fd.fd, chunk, kSnapshotChunkBytes, Clock::now() + timeout, error)) {
      if (!process_alive(pid))
        throw ControlError(FailureKind::gone, pid, who(pid) + " ended before it sent the whole snapshot");
      throw ControlError(FailureKind::no_answer, pid,
                         who(pid) + " stopped sending the snapshot after " + std::to_string(summary.bytes) +
                             " bytes (" + error + ")");
    }
    if (chunk.empty()) break;  // the end of the document
    summary.bytes += chunk.size();
    sink(chunk);
  }
  nlohmann::json trailer = read_answer(pid, c, Clock::now() + timeout, timeout);
  if (int_field(trailer, "bytes") != std::int64_t(summary.bytes))
    throw ControlError(FailureKind::refused, pid,
                       who(pid) + " announced " + std::to_string(int_field(trailer, "bytes")) +
                           " bytes of snapshot but sent " + std::to_string(summary.bytes));
  return summary;
}

std::int64_t ask_others_to_release(const std::string& device_key, std::chrono::milliseconds per_process) noexcept {
  std::int64_t total = 0;
  try {
    int self = getpid();
    for (const ProcessRef& p : list_processes(true)) {
      if (p.pid == self) continue;
      try {
        total += release(p.pid, device_key, per_process);
      } catch (const ControlError&) {
        // skipped: it did not answer in time, is gone, or refused
      }
    }
  } catch (...) {
  }
  return total;
}

}  // namespace gpumem::control
