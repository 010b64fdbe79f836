// cpp-httplib's Server with a deadline on each whole request. httplib's read timeout applies to each read,
// so a client that sends its header a byte every few seconds held one of the fixed pool's workers for as
// long as it liked: eight such clients and no scrape was answered. Here each connection's socket is read
// and written through a stream that gives up once a request has taken longer than its deadline (reading
// it, running the handler, writing the answer), and between requests of a kept-alive connection waits at
// most the keep-alive timeout. Everything else is httplib's own (routing, parsing, answers).
// Contract: construct, configure as an httplib::Server; set_request_deadline() before listening.
#pragma once
#include <httplib.h>

#include <chrono>

namespace gpumem::exporter {

class DeadlineServer final : public httplib::Server {
 public:
  void set_request_deadline(std::chrono::milliseconds deadline) { deadline_ = deadline; }

 private:
  // httplib calls this on a worker thread for each accepted connection (a virtual of httplib::Server).
  bool process_and_close_socket(socket_t sock) override;

  std::chrono::milliseconds deadline_{5000};
};

}  // namespace gpumem::exporter
