// The request parser and handlers against everything a peer may send: valid requests do what they say,
// anything else gets an error answer and the allocator is unharmed.
#include <gtest/gtest.h>

#include <random>

#include "control/channel.hpp"
#include "control/protocol.hpp"
#include "control/server.hpp"
#include "gpumem/host_backend.hpp"

namespace gpumem::control {
namespace {

struct Fixture {
  static HostBackendOptions options() {
    HostBackendOptions o;
    o.capacity = 64 << 20;
    return o;
  }
  Allocator allocator{std::make_shared<HostBackend>(options())};
  ServerHooks hooks;
  Fixture() {
    hooks.devices = [this] { return std::vector<ServedDevice>{{0, &allocator, "host-shared:x"}}; };
    hooks.make_device = [this](int device) -> Allocator& {
      if (device != 0) throw std::invalid_argument("no device " + std::to_string(device));
      return allocator;
    };
  }
  nlohmann::json ask(const std::string& body) {
    nlohmann::json a = nlohmann::json::parse(handle_request_body(body, hooks), nullptr, false);
    EXPECT_TRUE(a.is_object() && a.contains("ok") && a["ok"].is_boolean()) << body;
    EXPECT_EQ(a.value("v", 0), kProtocolVersion);
    return a;
  }
};

TEST(ControlProtocol, ValidRequestsDoWhatTheySay) {
  Fixture f;
  void* live = f.allocator.allocate(3 << 20);
  void* cached = f.allocator.allocate(8 << 20);
  f.allocator.deallocate(cached);
  auto stats = f.ask(R"({"v":1,"op":"stats"})");
  ASSERT_TRUE(stats["ok"].get<bool>());
  EXPECT_EQ(stats["devices"][0]["allocated_bytes"], 3 << 20);
  auto cleared = f.ask(R"({"v":1,"op":"clear"})");
  EXPECT_EQ(cleared["released_bytes"], 8 << 20);
  EXPECT_EQ(f.allocator.stats().reserved_bytes[0].current, 4 << 20);  // 3 MiB live, 2 MiB pages
  auto limited = f.ask(R"({"v":1,"op":"limit","device":0,"bytes":2097152})");
  EXPECT_FALSE(limited["fits"].get<bool>());
  EXPECT_EQ(f.allocator.limit(), 2u << 20);
  EXPECT_TRUE(f.ask(R"({"v":1,"op":"limit","fraction":0.5})")["fits"].get<bool>());
  EXPECT_EQ(f.allocator.limit(), 32u << 20);
  EXPECT_EQ(f.ask(R"({"v":1,"op":"release","device_key":"other"})")["released_bytes"], 0);
  f.allocator.deallocate(live);
  EXPECT_TRUE(f.ask(R"({"v":1,"op":"reset"})")["ok"].get<bool>());
  EXPECT_EQ(f.allocator.stats().allocated_bytes[0].peak, 0);
}

TEST(ControlProtocol, BadRequestsGetOneSentence) {
  Fixture f;
  for (const char* body : {"", "{", "[]", "42", R"({"op":"stats"})", R"({"v":2,"op":"stats"})",
                           R"({"v":1})", R"({"v":1,"op":7})", R"({"v":1,"op":"format_disk"})",
                           R"({"v":1,"op":"limit"})", R"({"v":1,"op":"limit","bytes":1,"fraction":0.5})",
                           R"({"v":1,"op":"limit","bytes":-1})", R"({"v":1,"op":"limit","fraction":1.5})",
                           R"({"v":1,"op":"limit","fraction":0})", R"({"v":1,"op":"limit","device":-1,"bytes":1})",
                           R"({"v":1,"op":"limit","device":3,"bytes":1})", R"({"v":1,"op":"release"})",
                           R"({"v":1,"op":"release","device_key":""})"}) {
    auto a = f.ask(body);
    EXPECT_FALSE(a["ok"].get<bool>()) << body;
    EXPECT_FALSE(a["error"].get<std::string>().empty()) << body;
  }
  // Found by the fuzzer: an unknown operation whose name is cut inside a UTF-8 sequence in the sentence.
  std::string cut = std::string(R"({"v":1,"op":")") + std::string(39, 'x') + "\xd4\x9b\"}";
  EXPECT_FALSE(f.ask(cut)["ok"].get<bool>());
  std::string huge = R"({"v":1,"op":"stats","pad":")" + std::string(kMaxRequestBytes, 'x') + "\"}";
  EXPECT_NE(f.ask(huge)["error"].get<std::string>().find("limit"), std::string::npos);
}

// Fuzz-style: random bytes and random mutations of valid requests, many thousands, never a crash or an
// answer that is not a well-formed error or success; the allocator's invariants hold throughout.
TEST(ControlProtocol, RandomAndMutatedRequests) {
  Fixture f;
  void* live = f.allocator.allocate(1 << 20);
  const std::vector<std::string> seeds = {R"({"v":1,"op":"stats"})", R"({"v":1,"op":"clear"})",
                                          R"({"v":1,"op":"limit","device":0,"bytes":0})",
                                          R"({"v":1,"op":"limit","fraction":1.0})",
                                          R"({"v":1,"op":"release","device_key":"k"})"};
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 20000; ++i) {
    std::string body = seeds[rng() % seeds.size()];
    int mutations = 1 + int(rng() % 4);
    for (int m = 0; m < mutations; ++m) {
      std::size_t at = body.empty() ? 0 : rng() % body.size();
      switch (rng() % 4) {
        case 0: if (!body.empty()) body[at] = char(rng() % 256); break;
        case 1: body.insert(at, 1, "{}[]\":,0123456789.-e"[rng() % 20]); break;
        case 2: if (!body.empty()) body.erase(at, 1 + rng() % 4); break;
        default: body = std::string(rng() % 64, '\0'); for (auto& c : body) c = char(rng() % 256);
      }
    }
    f.ask(body);
  }
  f.allocator.set_limit(0);
  f.allocator.check_invariants();
  EXPECT_EQ(f.allocator.stats().allocated_bytes[0].current, 1 << 20);
  f.allocator.deallocate(live);
}

TEST(ControlProtocol, FramesAndPeerRule) {
  std::string framed = frame("abc");
  ASSERT_EQ(framed.size(), 7u);
  EXPECT_EQ(frame_length(reinterpret_cast<const unsigned char*>(framed.data())), 3u);
  EXPECT_TRUE(peer_allowed(1000, 1000));
  EXPECT_TRUE(peer_allowed(0, 1000));
  EXPECT_FALSE(peer_allowed(1001, 1000));
  EXPECT_FALSE(peer_allowed(65534, 0));
}

}  // namespace
}  // namespace gpumem::control
