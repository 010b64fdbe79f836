#include "exporter/deadline_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace gpumem::exporter {
namespace {
using Clock = std::chrono::steady_clock;

void ip_and_port(const sockaddr_storage& addr, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (addr.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  }
  ip = text;
}

// A connection's socket, read through a small buffer (httplib reads a header a byte at a time), every
// read and write giving up at the deadline of the request under way.
class DeadlineStream final : public httplib::Stream {
 public:
  explicit DeadlineStream(socket_t sock) : sock_(sock) {}

  // A new request: its deadline; nothing of its answer written yet.
  void start_request(Clock::time_point deadline) {
    deadline_ = deadline;
    answered_ = 0;
  }
  // The request ran past its deadline, or was answered 4xx (malformed, refused): the connection ends
  // (else a client trickling lines got a quick 400 for each and kept its worker).
  bool spent() const { return expired_ || refused_; }
  // Whether `events` come before `until`, asking `go_on` every 100 ms (the server may be stopping).
  template <typename GoOn>
  bool wait(short events, Clock::time_point until, GoOn go_on) const {
    while (go_on()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{sock_, events, 0};
      const int n = ::poll(&p, 1, int(std::min<long long>(left, 100)));
      if (n > 0) return true;  // ready, or hung up / failed: the read or write then says so
      if (n < 0 && errno != EINTR) return false;
    }
    return false;
  }
  bool wait(short events) const {
    if (wait(events, deadline_, [] { return true; })) return true;
    expired_ = true;
    return false;
  }

  bool is_readable() const override { return pos_ < end_ || wait(POLLIN); }
  bool is_writable() const override { return wait(POLLOUT); }
  ssize_t read(char* ptr, size_t size) override {
    if (pos_ == end_) {
      if (!wait(POLLIN)) return -1;
      ssize_t n;
      do n = ::recv(sock_, buffer_, sizeof buffer_, 0);
      while (n < 0 && errno == EINTR);
      if (n <= 0) return n;
      pos_ = 0;
      end_ = std::size_t(n);
    }
    const std::size_t n = std::min(size, end_ - pos_);
    std::memcpy(ptr, buffer_ + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    // The status line's first digit: "HTTP/1.1 4.." is at offset 9.
    if (answered_ <= 9 && answered_ + size > 9 && ptr[9 - answered_] == '4') refused_ = true;
    answered_ += size;
    if (!wait(POLLOUT)) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip_and_port(addr, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  socket_t sock_;
  Clock::time_point deadline_ = Clock::now();
  mutable bool expired_ = false;
  bool refused_ = false;
  std::size_t answered_ = 0;  // bytes of this request's answer written
  char buffer_[4096];
  std::size_t pos_ = 0, end_ = 0;  // unread bytes of buffer_
};

}  // namespace

bool DeadlineServer::process_and_close_socket(socket_t sock) {
  DeadlineStream stream(sock);
  const auto serving = [this] { return svr_sock_ != INVALID_SOCKET; };
  bool ok = true;
  for (std::size_t left = keep_alive_max_count_; left > 0; --left) {
    // A request (the first, or the next on a kept-alive connection) must begin within the keep-alive
    // timeout and be answered within the deadline.
    if (!stream.wait(POLLIN, Clock::now() + std::chrono::seconds(keep_alive_timeout_sec_), serving)) break;
    stream.start_request(Clock::now() + deadline_);
    bool closed = false;
    ok = process_request(stream, left == 1, closed, [](httplib::Request&) {});
    if (!ok || closed || stream.spent()) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

}  // namespace gpumem::exporter
