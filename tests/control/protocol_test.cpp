// The request parser and handlers against everything a peer may send: valid requests do what they say,
// anything else gets an error answer and the allocator is unharmed.
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <future>
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
  std::vector<std::pair<int, PendingLimit>> pending;
  Fixture() {
    hooks.devices = [this] { return std::vector<ServedDevice>{{0, &allocator, "host-shared:x"}}; };
    hooks.limit_unmade = [this](int device, const PendingLimit& limit) -> bool {
      if (device >= 8) throw std::invalid_argument("device " + std::to_string(device) + " is out of range");
      pending.emplace_back(device, limit);
      return true;
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
  auto head = f.ask(R"({"v":1,"op":"snapshot","format":"json","device":0})");
  EXPECT_EQ(head["format"], "json");
  EXPECT_EQ(head["devices"], 1);
  EXPECT_EQ(head["active_blocks"], 0);
}

TEST(ControlProtocol, BadRequestsGetOneSentence) {
  Fixture f;
  for (const char* body : {"", "{", "[]", "42", R"({"op":"stats"})", R"({"v":2,"op":"stats"})",
                           R"({"v":1})", R"({"v":1,"op":7})", R"({"v":1,"op":"format_disk"})",
                           R"({"v":1,"op":"limit"})", R"({"v":1,"op":"limit","bytes":1,"fraction":0.5})",
                           R"({"v":1,"op":"limit","bytes":-1})", R"({"v":1,"op":"limit","fraction":1.5})",
                           R"({"v":1,"op":"limit","fraction":0})", R"({"v":1,"op":"limit","device":-1,"bytes":1})",
                           R"({"v":1,"op":"limit","device":9,"bytes":1})", R"({"v":1,"op":"release"})",
                           R"({"v":1,"op":"release","device_key":""})",
                           R"({"v":1,"op":"snapshot","format":"xml"})", R"({"v":1,"op":"snapshot","format":1})",
                           R"({"v":1,"op":"snapshot","device":-1})", R"({"v":1,"op":"snapshot","device":"0"})",
                           R"({"v":1,"op":"snapshot","device":3})"}) {
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
                                          R"({"v":1,"op":"release","device_key":"k"})",
                                          R"({"v":1,"op":"snapshot","format":"json","device":0})"};
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

// The snapshot operation over a real connection (a socketpair served as the server thread serves one).
struct SnapshotConnection {
  int client = -1, server = -1;
  std::future<void> served;
  SnapshotConnection(Fixture& f, const std::string& request) {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    client = sv[0];
    server = sv[1];
    served = std::async(std::launch::async, [this, &f] { serve_connection(server, f.hooks); });
    std::string error;
    EXPECT_TRUE(send_frame(client, request, Clock::now() + std::chrono::seconds(2), error)) << error;
  }
  ~SnapshotConnection() {
    if (client >= 0) close(client);
    served.wait();
    close(server);
  }
  nlohmann::json answer() {
    std::string body, error;
    EXPECT_TRUE(recv_frame(client, body, kMaxAnswerBytes, Clock::now() + std::chrono::seconds(5), error)) << error;
    return nlohmann::json::parse(body, nullptr, false);
  }
};

TEST(ControlProtocol, SnapshotStreamsInChunksEndedByATrailer) {
  Fixture f;
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(f.allocator.allocate(512));
  {
    SnapshotConnection c(f, R"({"v":1,"op":"snapshot","format":"pickle"})");
    nlohmann::json head = c.answer();
    ASSERT_TRUE(head.value("ok", false)) << head.dump();
    EXPECT_EQ(head["active_blocks"], 20000);
    std::string doc, chunk, error;
    int chunks = 0;
    for (;;) {
      ASSERT_TRUE(recv_frame(c.client, chunk, kSnapshotChunkBytes, Clock::now() + std::chrono::seconds(5), error))
          << error;
      if (chunk.empty()) break;
      doc += chunk;
      ++chunks;
    }
    nlohmann::json trailer = c.answer();
    EXPECT_TRUE(trailer.value("ok", false)) << trailer.dump();
    EXPECT_EQ(trailer["bytes"], doc.size());
    EXPECT_GE(chunks, 4);
    ASSERT_GT(doc.size(), 2u);
    EXPECT_EQ(doc.front(), '\x80');  // pickle PROTO
    EXPECT_EQ(doc.back(), '.');       // pickle STOP
  }
  for (void* p : blocks) f.allocator.deallocate(p);
}

TEST(ControlProtocol, SnapshotClientThatLeavesOrStallsDoesNotHoldTheServer) {
  Fixture f;
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(f.allocator.allocate(512));
  for (bool stall : {false, true}) {
    auto start = Clock::now();
    {
      SnapshotConnection c(f, R"({"v":1,"op":"snapshot"})");
      EXPECT_TRUE(c.answer().value("ok", false));
      if (!stall) {
        close(c.client);
        c.client = -1;
      }
      // A stalled client: the server's sends fill the socket and wait at most 2 s for room.
      EXPECT_EQ(c.served.wait_for(std::chrono::seconds(6)), std::future_status::ready) << "stall " << stall;
    }
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(6));
  }
  EXPECT_TRUE(f.ask(R"({"v":1,"op":"stats"})")["ok"].get<bool>());  // the server goes on
  f.allocator.check_invariants();
  for (void* p : blocks) f.allocator.deallocate(p);
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
