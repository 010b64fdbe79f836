// libFuzzer target for the control server's request handling (scripts/fuzz-control.sh builds and runs it):
// any bytes as a request body must give one well-formed answer and leave the allocator consistent.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "control/protocol.hpp"
#include "control/server.hpp"
#include "gpumem/host_backend.hpp"

namespace {

gpumem::Allocator& allocator() {
  static gpumem::Allocator* a = [] {
    gpumem::HostBackendOptions o;
    o.capacity = 64 << 20;
    auto* made = new gpumem::Allocator(std::make_shared<gpumem::HostBackend>(o));
    made->allocate(1 << 20);  // some live memory that no request may take away
    return made;
  }();
  return *a;
}

const gpumem::control::ServerHooks& hooks() {
  static gpumem::control::ServerHooks h = [] {
    gpumem::control::ServerHooks out;
    out.devices = [] { return std::vector<gpumem::control::ServedDevice>{{0, &allocator(), "host-shared:fuzz"}}; };
    out.limit_unmade = [](int, const gpumem::control::PendingLimit&) -> bool {
      throw std::invalid_argument("no such device");
    };
    return out;
  }();
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string body(reinterpret_cast<const char*>(data), size);
  nlohmann::json answer = nlohmann::json::parse(gpumem::control::handle_request_body(body, hooks()), nullptr, false);
  if (!answer.is_object() || !answer.contains("ok") || !answer["ok"].is_boolean()) std::abort();
  if (!answer["ok"].get<bool>() && !answer["error"].is_string()) std::abort();
  allocator().set_limit(0);
  if (allocator().stats().allocated_bytes[0].current != 1 << 20) std::abort();
  return 0;
}
