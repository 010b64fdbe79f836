// Socket directory rules, peer credentials and deadline-bound framed I/O (see channel.hpp).
#include "control/channel.hpp"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "control/protocol.hpp"

namespace gpumem::control {
namespace {

bool is_private_dir_of(const std::string& dir, uid_t uid) {
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) return false;
  return S_ISDIR(st.st_mode) && st.st_uid == uid && (st.st_mode & 077) == 0;
}

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left <= 0 ? 0 : int(left);
}

// Waits until fd is ready for `events`; false on timeout or error.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return false;
  }
}

}  // namespace

std::string socket_dir_for(uid_t uid) {
  if (const char* dir = std::getenv("GPUMEM_CONTROL_DIR"); dir && *dir) return dir;
  if (uid == getuid()) {
    if (const char* xdg = std::getenv("XDG_RUNTIME_DIR"); xdg && *xdg && is_private_dir_of(xdg, uid))
      return std::string(xdg) + "/gpumem";
  }
  return "/tmp/gpumem-" + std::to_string(uid);
}

std::optional<std::string> ensure_own_socket_dir(std::string& error) {
  std::string dir = socket_dir_for(getuid());
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    error = "cannot create " + dir + ": " + std::strerror(errno);
    return std::nullopt;
  }
  if (!is_private_dir_of(dir, getuid())) {
    error = dir + " is not a directory owned by this user with mode 0700; the control channel stays off";
    return std::nullopt;
  }
  return dir;
}

std::vector<std::string> candidate_socket_dirs(bool every_user) {
  std::vector<std::string> dirs{socket_dir_for(getuid())};
  if (!every_user || std::getenv("GPUMEM_CONTROL_DIR")) return dirs;
  // Another user's directory only when it is really theirs: a 0700 directory (no symlink) owned by the
  // uid its name gives. A user could otherwise point root's scan at any directory.
  auto add = [&](const std::string& d, const char* uid_text) {
    // A uid written as the kernel writes it: digits, no leading zero, below 2^32 - 1 (-1 is no uid).
    if (!*uid_text || std::strspn(uid_text, "0123456789") != std::strlen(uid_text) || std::strlen(uid_text) > 10) return;
    const unsigned long long uid = std::strtoull(uid_text, nullptr, 10);
    if (uid >= 0xFFFFFFFFull || std::to_string(uid) != uid_text) return;
    for (const auto& seen : dirs)
      if (seen == d) return;
    if (is_private_dir_of(d, uid_t(uid))) dirs.push_back(d);
  };
  if (DIR* tmp = opendir("/tmp")) {
    while (dirent* e = readdir(tmp))
      if (std::strncmp(e->d_name, "gpumem-", 7) == 0) add(std::string("/tmp/") + e->d_name, e->d_name + 7);
    closedir(tmp);
  }
  if (DIR* run = opendir("/run/user")) {
    while (dirent* e = readdir(run)) add(std::string("/run/user/") + e->d_name + "/gpumem", e->d_name);
    closedir(run);
  }
  return dirs;
}

std::string socket_path(const std::string& dir, int pid) { return dir + "/" + std::to_string(pid) + ".sock"; }

bool peer_allowed(uid_t peer, uid_t self) { return peer == self || peer == 0; }

std::optional<PeerCred> peer_cred(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return PeerCred{int(cred.pid), cred.uid};
}

SocketProbe probe_socket(const std::string& path) {
  SocketProbe out;
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return out;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    if (std::optional<PeerCred> peer = peer_cred(fd)) out = {SocketProbe::listening, *peer};
  } else if (errno == ECONNREFUSED) {
    struct stat st {};
    const bool done = lstat(path.c_str(), &st) == 0 && (!S_ISSOCK(st.st_mode) || std::time(nullptr) - st.st_mtime > 2);
    if (done) {
      out.kind = SocketProbe::stale;
      // Only in our own directory: root scanning other users' must never delete there (a directory
      // swapped for a symlink after it was checked would point the unlink anywhere).
      const std::string own = socket_dir_for(getuid());
      if (path.size() > own.size() && path.compare(0, own.size(), own) == 0 && path[own.size()] == '/' &&
          path.find('/', own.size() + 1) == std::string::npos && is_private_dir_of(own, getuid()))
        unlink(path.c_str());
    }
  }
  close(fd);
  return out;
}

bool process_alive(int pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  // A zombie has ended; only its parent has not collected it yet.
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  char buf[512] = {};
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return true;
  std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* paren = std::strrchr(buf, ')');
  return !(n > 0 && paren && paren[1] == ' ' && paren[2] == 'Z');
}

bool send_frame(int fd, std::string_view body, Clock::time_point deadline, std::string& error) {
  std::array<char, 4> header = frame_header(body.size());
  auto send_all = [&](const char* data, std::size_t size) {
    std::size_t sent = 0;
    while (sent < size) {
      if (!wait_ready(fd, POLLOUT, deadline)) {
        error = "timed out sending";
        return false;
      }
      ssize_t k = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        error = std::string("send failed: ") + std::strerror(errno);
        return false;
      }
      sent += std::size_t(k);
    }
    return true;
  };
  return send_all(header.data(), header.size()) && send_all(body.data(), body.size());
}

bool recv_frame(int fd, std::string& body, std::size_t max_bytes, Clock::time_point deadline, std::string& error) {
  auto read_exact = [&](char* out, std::size_t want) {
    std::size_t got = 0;
    while (got < want) {
      if (!wait_ready(fd, POLLIN, deadline)) {
        error = "timed out waiting";
        return false;
      }
      ssize_t n = ::recv(fd, out + got, want - got, MSG_DONTWAIT);
      if (n == 0) {
        error = "connection closed";
        return false;
      }
      if (n < 0) {
        if (errno == EINTR || errno == EAGAIN) continue;
        error = std::string("receive failed: ") + std::strerror(errno);
        return false;
      }
      got += std::size_t(n);
    }
    return true;
  };
  unsigned char header[4];
  if (!read_exact(reinterpret_cast<char*>(header), 4)) return false;
  std::uint32_t length = frame_length(header);
  if (length > max_bytes) {
    error = "message of " + std::to_string(length) + " bytes is over the " + std::to_string(max_bytes) +
            "-byte limit";
    return false;
  }
  body.assign(length, '\0');
  return read_exact(body.data(), length);
}

}  // namespace gpumem::control
