// Control server: accept loop on a background thread, request handlers over the default allocators.
#include "control/server.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <mutex>
#include <thread>

#include "control/channel.hpp"
#include "engine/env_switch.hpp"
#include "control/protocol.hpp"
#include "control/server_snapshot.hpp"

namespace gpumem::control {
namespace {

std::atomic<bool> g_stop_requested{false};
std::mutex g_start_mutex;
bool g_started = false;
std::string g_socket_path;  // written once under g_start_mutex before the thread starts
ServerHooks* g_hooks = nullptr;  // leaked: the thread may run until exit

std::int64_t reserved_of(const Allocator& a) { return a.stats().reserved_bytes[kAggregatePool].current; }

nlohmann::json device_report(const ServedDevice& d) {
  DeviceStats s = d.allocator->stats();
  nlohmann::json j = {
      {"device", d.index},
      {"backend", d.allocator->backend().name()},
      {"device_key", d.device_key},
      {"allocated_bytes", s.allocated_bytes[kAggregatePool].current},
      {"allocated_peak_bytes", s.allocated_bytes[kAggregatePool].peak},
      {"reserved_bytes", s.reserved_bytes[kAggregatePool].current},
      {"reserved_peak_bytes", s.reserved_bytes[kAggregatePool].peak},
      {"requested_bytes", s.requested_bytes[kAggregatePool].current},
      {"requested_peak_bytes", s.requested_bytes[kAggregatePool].peak},
      {"largest_free_bytes", d.allocator->largest_free_block()},
      {"num_ooms", s.num_ooms},
      {"num_alloc_retries", s.num_alloc_retries},
      {"limit_bytes", d.allocator->limit()},
  };
  return j;
}

std::int64_t release_all(const std::vector<ServedDevice>& devices, const std::string& only_key = {}) {
  std::int64_t released = 0;
  for (const auto& d : devices) {
    if (!only_key.empty() && d.device_key != only_key) continue;
    std::int64_t before = reserved_of(*d.allocator);
    d.allocator->empty_cache();
    released += before - reserved_of(*d.allocator);
  }
  return released;
}

nlohmann::json answer(const Request& r, const ServerHooks& hooks) {
  std::vector<ServedDevice> devices = hooks.devices();
  nlohmann::json a = ok_answer();
  switch (r.op) {
    case Op::stats: {
      a["pid"] = getpid();
      a["devices"] = nlohmann::json::array();
      for (const auto& d : devices) a["devices"].push_back(device_report(d));
      return a;
    }
    case Op::clear:
      a["released_bytes"] = release_all(devices);
      return a;
    case Op::reset:
      for (const auto& d : devices) d.allocator->reset_peak_stats();
      return a;
    case Op::limit: {
      const auto served = [&](const std::vector<ServedDevice>& now) -> Allocator* {
        for (const auto& d : now)
          if (d.index == r.device) return d.allocator;
        return nullptr;
      };
      Allocator* found = served(devices);
      if (!found && hooks.limit_unmade && hooks.limit_unmade(r.device, {r.bytes, r.fraction})) {
        a["limit_bytes"] = r.bytes.value_or(0);
        if (r.fraction) a["limit_fraction"] = *r.fraction;
        a["reserved_bytes"] = 0;
        a["released_bytes"] = 0;
        a["fits"] = true;
        a["pending"] = true;  // applied when the program first allocates there
        return a;
      }
      if (!found) found = served(hooks.devices());
      if (!found) return error_answer("the process has no allocator on device " + std::to_string(r.device));
      Allocator& al = *found;
      const std::int64_t before = reserved_of(al);  // a lower limit gives back cache itself (set_limit)
      if (r.fraction) al.set_memory_fraction(*r.fraction);
      else al.set_limit(std::size_t(*r.bytes));
      std::size_t limit = al.limit();
      if (limit != 0 && std::size_t(reserved_of(al)) > limit) al.empty_cache();
      const std::int64_t released = std::max<std::int64_t>(0, before - reserved_of(al));
      a["limit_bytes"] = limit;
      a["reserved_bytes"] = reserved_of(al);
      a["released_bytes"] = released;
      a["fits"] = limit == 0 || std::size_t(reserved_of(al)) <= limit;
      return a;
    }
    case Op::stop:
      g_stop_requested.store(true, std::memory_order_release);
      a["released_bytes"] = release_all(devices);
      return a;  // serve_one sends SIGINT after the answer is out
    case Op::release:
      a["released_bytes"] = release_all(devices, r.device_key);
      return a;
    case Op::snapshot:
      return snapshot_head(r, hooks);  // the document goes over the connection (serve_snapshot)
  }
  return error_answer("unhandled operation");
}

bool peer_hung_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void serve_one(int fd, const ServerHooks& hooks) {
  // Connections are served one at a time, and a client sends its request as soon as it has connected:
  // one that sends nothing holds the others up for half a second, not for the 2 s a client waits (two
  // idle connections made every `gpumem stats` time out).
  const Clock::time_point request_deadline = Clock::now() + std::chrono::milliseconds(500);
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  std::string error;
  std::optional<PeerCred> peer = peer_cred(fd);
  if (!peer || !peer_allowed(peer->uid, getuid())) {
    send_frame(fd, to_wire(error_answer("refused: the caller runs as another user")), deadline, error);
    return;
  }
  std::string body;
  if (!recv_frame(fd, body, kMaxRequestBytes, request_deadline, error)) {
    send_frame(fd, to_wire(error_answer("bad request: " + error)), deadline, error);
    return;
  }
  // A caller that gave up (it timed out while this process was stopped, or was interrupted) was told the
  // request failed: acting on it now would stop or limit a process behind its back.
  if (peer_hung_up(fd)) return;
  std::string parse_error;  // a snapshot answers in many frames; everything else in one (parsed again there)
  if (std::optional<Request> r = parse_request(body, parse_error); r && r->op == Op::snapshot) {
    serve_snapshot(fd, *r, hooks);
    return;
  }
  bool is_stop = false;
  send_frame(fd, handle_request_body(body, hooks, &is_stop), deadline, error);
  if (is_stop) kill(getpid(), SIGINT);
}

void serve_forever(int listen_fd) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      return;
    }
    serve_connection(fd, *g_hooks);
    close(fd);
  }
}

pid_t g_server_pid = 0;

// A forked child (DataLoader workers) inherits this handler but not the socket: only the owner removes it.
void unlink_at_exit() {
  if (!g_socket_path.empty() && getpid() == g_server_pid) unlink(g_socket_path.c_str());
}

// Sockets named for processes that are gone are removed so nobody connects to a recycled pid's socket.
void remove_stale_sockets(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (pid > 0 && end && std::strcmp(end, ".sock") == 0) probe_socket(dir + "/" + e->d_name);  // unlinks stale ones
  }
  closedir(d);
}

}  // namespace

std::string handle_request_body(const std::string& body, const ServerHooks& hooks, bool* is_stop) {
  std::string error;
  std::optional<Request> request = parse_request(body, error);
  if (!request) return to_wire(error_answer("bad request: " + error));
  if (is_stop) *is_stop = request->op == Op::stop;
  try {
    return to_wire(answer(*request, hooks));
  } catch (const std::exception& e) {
    std::string_view why = e.what();  // the client names the process; the library's own prefix would repeat
    if (why.starts_with("gpumem: ")) why.remove_prefix(8);
    return to_wire(error_answer(std::string(why)));
  } catch (...) {
    return to_wire(error_answer("internal error"));
  }
}

bool start_server(ServerHooks hooks, std::string& why) {
  std::lock_guard lock(g_start_mutex);
  if (g_started) return true;
  if (const char* env = std::getenv("GPUMEM_CONTROL"); env && *env) {
    const std::optional<bool> on = parse_switch(env);
    if (!on) {
      why = std::string("GPUMEM_CONTROL='") + env + "' is neither on nor off (use " + kSwitchWords + ")";
      return false;
    }
    if (!*on) {
      why = "GPUMEM_CONTROL=0";
      return false;
    }
  }
  std::optional<std::string> dir = ensure_own_socket_dir(why);
  if (!dir) return false;
  remove_stale_sockets(*dir);
  std::string path = socket_path(*dir, getpid());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    why = "socket path " + path + " is too long";
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    why = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  unlink(path.c_str());  // a leftover of an earlier process with our pid
  mode_t old_mask = umask(077);
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  umask(old_mask);
  if (rc != 0 || chmod(path.c_str(), 0600) != 0 || listen(fd, 16) != 0) {
    why = "cannot listen on " + path + ": " + std::strerror(errno);
    close(fd);
    return false;
  }
  g_hooks = new ServerHooks(std::move(hooks));
  g_socket_path = path;
  g_server_pid = getpid();
  // The thread must not take signals meant for the program (SIGINT belongs to its main thread).
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  try {
    std::thread(serve_forever, fd).detach();
  } catch (const std::exception& e) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    why = std::string("cannot start the control thread: ") + e.what();
    unlink(path.c_str());
    close(fd);
    return false;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  std::atexit(unlink_at_exit);
  g_started = true;
  return true;
}

void serve_connection(int fd, const ServerHooks& hooks) {
  try {
    serve_one(fd, hooks);
  } catch (...) {
    // out of host memory: this connection ends, the server goes on
  }
}

bool server_running() {
  std::lock_guard lock(g_start_mutex);
  return g_started;
}

std::string server_socket_path() {
  std::lock_guard lock(g_start_mutex);
  return g_started ? g_socket_path : std::string();
}

bool stop_requested() { return g_stop_requested.load(std::memory_order_acquire); }

}  // namespace gpumem::control
