// Real gpumem processes (tests/control/control_target.cpp, host backend, C ABI) controlled from outside
// through the client library and the gpumem binary.
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <thread>
#include <vector>

#include "control/channel.hpp"
#include "control/client.hpp"
#include "control/target_process.hpp"
#include "nvml/fake_nvml_env.hpp"

namespace gpumem::control {
namespace {

using test_support::ControlDir;
using test_support::kGpumem;
using test_support::MiB;
using test_support::shell;
using test_support::Target;

TEST(ControlProcess, StatsMatchWhatTheProcessReports) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 5000000"), "ok");
  ASSERT_EQ(t.ask("alloc 3000000"), "ok");
  ASSERT_EQ(t.ask("free"), "ok");
  nlohmann::json self = t.self_stats();
  ProcessReport r = stats(t.pid());
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].backend, "host");
  EXPECT_EQ(r.devices[0].allocated_bytes, self["allocated"].get<std::int64_t>());
  EXPECT_EQ(r.devices[0].reserved_bytes, self["reserved"].get<std::int64_t>());
  EXPECT_EQ(r.devices[0].allocated_peak_bytes, self["peak_allocated"].get<std::int64_t>());
  EXPECT_EQ(r.devices[0].reserved_peak_bytes, self["peak_reserved"].get<std::int64_t>());
  auto listed = list_processes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].pid, t.pid());

  auto [rc, out] = shell(kGpumem + " stats --json " + std::to_string(t.pid()));
  ASSERT_EQ(rc, 0) << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_EQ(j[0]["devices"][0]["allocated_bytes"], self["allocated"]);

  reset_peaks(t.pid());
  EXPECT_EQ(t.self_stats()["peak_allocated"], self["allocated"]);

  ASSERT_EQ(t.ask("fork"), "ok");  // a forked child's exit() leaves the parent's socket alone
  EXPECT_EQ(stats(t.pid()).devices.size(), 1u);
}

TEST(ControlProcess, ClearBringsReservedDownToLive) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 3145728"), "ok");   // 3 MiB live
  ASSERT_EQ(t.ask("alloc 41943040"), "ok");  // 40 MiB, then freed: cached
  ASSERT_EQ(t.ask("free"), "ok");
  std::int64_t before = t.self_stats()["reserved"];
  auto [rc, out] = shell(kGpumem + " clear --json " + std::to_string(t.pid()));
  ASSERT_EQ(rc, 0) << out;
  std::int64_t after = t.self_stats()["reserved"];
  EXPECT_EQ(after, 4 * MiB);  // 3 MiB live, rounded to 2 MiB pages
  EXPECT_EQ(nlohmann::json::parse(out)[0]["released_bytes"].get<std::int64_t>(), before - after);
  EXPECT_EQ(t.self_stats()["allocated"], 3 * MiB);
  auto [all_rc, all_out] = shell(kGpumem + " clear --all --json");
  ASSERT_EQ(all_rc, 0) << all_out;
  auto all = nlohmann::json::parse(all_out);
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0]["pid"], t.pid());
  EXPECT_EQ(all[0]["released_bytes"], 0);  // nothing cached any more
}

TEST(ControlProcess, LimitFailsTheNextOversizeAllocationOnly) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 8388608"), "ok");
  ASSERT_EQ(t.ask("alloc 33554432"), "ok");
  ASSERT_EQ(t.ask("free"), "ok");  // 8 MiB live, 40 MiB reserved
  LimitAnswer a = limit_bytes(t.pid(), 0, 16 * MiB);
  EXPECT_TRUE(a.fits);
  EXPECT_EQ(a.limit_bytes, 16 * MiB);
  EXPECT_EQ(a.reserved_bytes, 8 * MiB);  // the cache was released to fit
  EXPECT_EQ(a.released_bytes, 32 * MiB);  // set_limit released it itself: still counted
  EXPECT_EQ(t.ask("alloc 12582912"), "oom");  // 8 + 12 > 16
  EXPECT_EQ(t.ask("alloc 4194304"), "ok");    // 8 + 4 fits
  LimitAnswer tight = limit_bytes(t.pid(), 0, 4 * MiB);
  EXPECT_FALSE(tight.fits);
  auto [rc, out] = shell(kGpumem + " limit " + std::to_string(t.pid()) + " 0");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(t.ask("alloc 12582912"), "ok");
  auto [bad_rc, bad_out] = shell(kGpumem + " limit " + std::to_string(t.pid()) + " lots 2>&1");
  EXPECT_EQ(bad_rc, 2) << bad_out;
  // Below a page, or beyond any device (shown wrapped to a negative number before): bad input, nothing set.
  for (const char* amount : {"1", "16777215TiB", "18446744073709551615"}) {
    auto [rc2, out2] = shell(kGpumem + " limit " + std::to_string(t.pid()) + " " + amount + " 2>&1");
    EXPECT_EQ(rc2, 2) << amount << ": " << out2;
    EXPECT_EQ(out2.find("gpumem: gpumem"), std::string::npos) << out2;
  }
  EXPECT_EQ(stats(t.pid()).devices[0].limit_bytes, 0);
  auto [dev_rc, dev_out] = shell(kGpumem + " limit " + std::to_string(t.pid()) + " 1GiB --device 99999999 2>&1");
  EXPECT_EQ(dev_rc, 2) << dev_out;
  EXPECT_NE(dev_out.find("from 0 to 63"), std::string::npos) << dev_out;
  auto [dev64_rc, dev64_out] = shell(kGpumem + " limit " + std::to_string(t.pid()) + " 1GiB --device 64 2>&1");
  EXPECT_EQ(dev64_rc, 2) << dev64_out;  // the process has no device 64: bad input (was exit 1 from the process)
}

// A limit on a device the program has not used yet must not make an allocator there (on a GPU: a CUDA
// context, hundreds of MiB): it waits for the program's first allocation on that device.
TEST(ControlProcess, ALimitOnAnUnusedDeviceWaitsForItsFirstAllocation) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  const std::string pid = std::to_string(t.pid());
  auto [rc, out] = shell(kGpumem + " limit " + pid + " 16MiB --device 1 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("from the program's first allocation there"), std::string::npos) << out;
  ASSERT_EQ(stats(t.pid()).devices.size(), 1u) << "an allocator was made on device 1";
  EXPECT_EQ(t.ask("allocon 1 33554432"), "oom");  // 32 MiB > the 16 MiB limit set before
  EXPECT_EQ(t.ask("allocon 1 8388608"), "ok");
  const ProcessReport after = stats(t.pid());
  ASSERT_EQ(after.devices.size(), 2u);
  EXPECT_EQ(after.devices[1].limit_bytes, 16 * MiB);
  auto [json_rc, json_out] = shell(kGpumem + " limit --json " + pid + " 0.5 --device 2");
  EXPECT_EQ(json_rc, 0) << json_out;
  const auto j = nlohmann::json::parse(json_out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << json_out;
  EXPECT_EQ(j["pending"], true);
  EXPECT_EQ(j["limit_fraction"], 0.5);
  EXPECT_EQ(stats(t.pid()).devices.size(), 2u);
  // A limit the allocator would refuse is refused now, by the CLI (exit 2) and by the target itself (a raw
  // request): kept, it made every allocation on that device fail.
  auto [tiny_rc, tiny_out] = shell(kGpumem + " limit " + pid + " 0.00001 --device 3 2>&1");
  EXPECT_EQ(tiny_rc, 2) << tiny_out;
  EXPECT_NE(tiny_out.find("below 0.0001"), std::string::npos) << tiny_out;
  EXPECT_THROW(limit_fraction(t.pid(), 3, 0.00001), ControlError);
  EXPECT_THROW(limit_bytes(t.pid(), 3, 4096), ControlError);
  EXPECT_EQ(t.ask("allocon 3 8388608"), "ok") << "device 3 broken by a refused limit";
  // Only the device's size tells whether a fraction holds a page (0.005 of 256 MiB does not): taken as
  // pending, it is dropped with a warning when the device is first used, not left to fail it.
  auto [small_rc, small_out] = shell(kGpumem + " limit " + pid + " 0.005 --device 4 2>&1");
  EXPECT_EQ(small_rc, 0) << small_out;
  EXPECT_EQ(t.ask("allocon 4 8388608"), "ok") << "device 4 broken by a pending limit that cannot apply";
}

// True once /proc says `pid` is stopped (state T), within 10 s.
bool wait_until_stopped(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const std::size_t close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T') return true;
    usleep(10000);
  }
  return false;
}

// A caller that gave up waiting (the process was stopped) was told its request failed: when the process
// runs again, the request must not take effect behind its back.
TEST(ControlProcess, ARequestWhoseCallerGaveUpIsDropped) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 4194304"), "ok");
  ASSERT_EQ(kill(t.pid(), SIGSTOP), 0);
  ASSERT_TRUE(wait_until_stopped(t.pid()));  // a signal is delivered when the target next runs
  EXPECT_THROW(limit_bytes(t.pid(), 0, 64 * MiB, std::chrono::milliseconds(300)), ControlError);
  EXPECT_THROW(stop(t.pid(), std::chrono::milliseconds(300)), ControlError);
  ASSERT_EQ(kill(t.pid(), SIGCONT), 0);
  ProcessReport r = stats(t.pid());  // answered after the two dropped requests (one connection at a time)
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].limit_bytes, 0);
  EXPECT_EQ(t.ask("alloc 1048576"), "ok");  // not stopped
}

// Connections are served one at a time: two that connect and send nothing held every other request past
// the client's 2 s (each was given 2 s to send its request); now half a second each.
TEST(ControlProcess, IdleConnectionsDoNotMakeOthersTimeOut) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 4194304"), "ok");
  const std::string path = dir.path + "/" + std::to_string(t.pid()) + ".sock";
  std::vector<int> idle;
  for (int i = 0; i < 2; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
    idle.push_back(fd);
  }
  ProcessReport r = stats(t.pid());  // throws ControlError when not answered within the client's 2 s
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].allocated_bytes, std::int64_t(4194304));
  for (int fd : idle) close(fd);
}

// A control directory that cannot be used (here a regular file) leaves the program running without the
// channel, and says so once on stderr: otherwise `gpumem stats` only reports that the process has none.
TEST(ControlProcess, AnUnusableControlDirectoryIsSaidOnce) {
  ControlDir dir;
  const std::string file = dir.path + "/not-a-dir";
  std::ofstream(file) << "x";
  auto [rc, out] = shell("echo quit | GPUMEM_BACKEND=host GPUMEM_CONTROL_DIR=" + file + " " CONTROL_TARGET " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("gpumem: no control channel for this process"), std::string::npos) << out;
  EXPECT_NE(out.find(file), std::string::npos) << out;
  auto [off_rc, off_out] = shell("echo quit | GPUMEM_BACKEND=host GPUMEM_CONTROL=0 " CONTROL_TARGET " 2>&1");
  EXPECT_EQ(off_out.find("no control channel"), std::string::npos) << off_out;  // asked to be off: silent
}

// Any process of this user may serve a socket in the control directory: answers of the wrong types read
// as absent fields or as a refusal in one printable line, never as an exception from the JSON library.
TEST(ControlProcess, AnswersOfTheWrongShapeAreReadSafely) {
  ControlDir dir;
  const std::string path = dir.path + "/" + std::to_string(getpid()) + ".sock";
  int listener = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(listener, 4), 0);
  const std::vector<std::string> answers = {
      R"({"v":1,"ok":"yes"})",
      R"({"v":1,"ok":true,"devices":[{"device":"x","backend":7,"limit_bytes":18446744073709551615,"reserved_bytes":-5}]})",
      "{\"v\":1,\"ok\":false,\"error\":\"bad\\n\\u001b[31mthing\"}"};
  std::thread server([&] {
    for (const std::string& answer : answers) {
      int c = accept(listener, nullptr, nullptr);
      std::string body, error;
      recv_frame(c, body, 1 << 20, Clock::now() + std::chrono::seconds(5), error);
      send_frame(c, answer, Clock::now() + std::chrono::seconds(5), error);
      close(c);
    }
  });
  EXPECT_THROW(stats(getpid()), ControlError);
  ProcessReport r = stats(getpid());
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].backend, "");
  EXPECT_EQ(r.devices[0].limit_bytes, INT64_MAX);
  try {
    stats(getpid());
    ADD_FAILURE() << "a refusal must throw";
  } catch (const ControlError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
    EXPECT_NE(what.find("bad\\n\\e[31mthing"), std::string::npos) << what;
  }
  server.join();
  close(listener);
}

TEST(ControlProcess, StatsPrintsNoTableForAProcessItCannotReach) {
  ControlDir dir;
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  auto [rc, out] = shell(kGpumem + " stats " + std::to_string(child) + " 2>/dev/null");
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(out, "");
  auto [bad_rc, bad_out] = shell(kGpumem + " stats abc 2>&1");
  EXPECT_EQ(bad_rc, 2);
  EXPECT_NE(bad_out.find("a PID is a positive whole number, not 'abc'"), std::string::npos) << bad_out;
}

TEST(ControlProcess, UnreachableProcessesGetOneSentence) {
  ControlDir dir;
  try {
    stats(int(getpid()));
    FAIL() << "no server in the test process";
  } catch (const ControlError& e) {
    EXPECT_EQ(e.kind(), FailureKind::not_gpumem);
  }
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  try {
    clear(child);
    FAIL();
  } catch (const ControlError& e) {
    EXPECT_EQ(e.kind(), FailureKind::gone);
  }
  Target off({"GPUMEM_CONTROL=0"});
  auto [rc, out] = shell(kGpumem + " stats " + std::to_string(off.pid()) + " 2>&1");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("GPUMEM_CONTROL=0"), std::string::npos) << out;
  // With --json every command answers a failure in JSON on stdout, as stats and clear do (reset, limit
  // and stop printed nothing there).
  for (const std::string command : {"stats", "clear", "reset", "limit", "stop"}) {
    const std::string args = command == "limit" ? " 1GiB" : "";
    auto [json_rc, json_out] = shell(kGpumem + " " + command + " --json " + std::to_string(off.pid()) + args + " 2>/dev/null");
    EXPECT_EQ(json_rc, 1) << command;
    const auto j = nlohmann::json::parse(json_out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << command << ": " << json_out;
    const auto& entry = j.is_array() ? j[0] : j;
    EXPECT_EQ(entry["pid"], off.pid()) << command;
    EXPECT_NE(entry["error"].get<std::string>().find("GPUMEM_CONTROL=0"), std::string::npos) << command;
  }
}

TEST(ControlProcess, StaleSocketsAreRemovedNotTrusted) {
  ControlDir dir;
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  std::string stale = dir.path + "/" + std::to_string(child) + ".sock";
  close(open(stale.c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_TRUE(list_processes().empty());
  EXPECT_NE(access(stale.c_str(), F_OK), 0);
  // A socket nobody listens on: stale once it is not new; a new one may be a server between bind and listen.
  const auto bound = [&](const std::string& name) {
    const std::string path = dir.path + "/" + name;
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << path;
    close(fd);
    return path;
  };
  const std::string old_socket = bound(std::to_string(child) + ".sock"), new_socket = bound("999999.sock");
  const timespec minute_ago[2] = {{time(nullptr) - 60, 0}, {time(nullptr) - 60, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, old_socket.c_str(), minute_ago, AT_SYMLINK_NOFOLLOW), 0);
  EXPECT_TRUE(list_processes().empty());
  EXPECT_NE(access(old_socket.c_str(), F_OK), 0) << "an old socket nobody listens on stays";
  EXPECT_EQ(access(new_socket.c_str(), F_OK), 0) << "a socket just bound was taken for stale";
  // Stale, but not in our own directory (another user's, or wherever a symlink pointed): never deleted.
  ControlDir elsewhere;
  setenv("GPUMEM_CONTROL_DIR", dir.path.c_str(), 1);  // ours stays `dir`
  const std::string foreign = elsewhere.path + "/" + std::to_string(child) + ".sock";
  close(open(foreign.c_str(), O_CREAT | O_WRONLY, 0600));
  EXPECT_EQ(probe_socket(foreign).kind, SocketProbe::stale);
  EXPECT_EQ(access(foreign.c_str(), F_OK), 0) << "deleted outside our own socket directory";
}

// Root's scan of every user's socket directory (stats --all, top, the exporter) deleted "stale" N.sock
// files wherever a user's /tmp/gpumem-UID or /run/user/UID/gpumem pointed (a symlink to a root-owned
// directory). It now looks only at 0700 directories owned by that uid, and deletes only in its own.
TEST(ControlProcess, RootsScanDeletesNothingInAnotherUsersDirectory) {
  if (geteuid() != 0) GTEST_SKIP() << "the scan of every user's directory is root's";
  unsetenv("GPUMEM_CONTROL_DIR");
  char tmpl[] = "/tmp/gpumem-victim-XXXXXX";
  const std::string victim = mkdtemp(tmpl);
  const std::string planted = victim + "/4242.sock";
  close(open(planted.c_str(), O_CREAT | O_WRONLY, 0600));  // root's file, no socket
  const uid_t uid = 900000000 + uid_t(getpid() % 100000);  // a uid nobody has
  const std::string link = "/tmp/gpumem-" + std::to_string(uid);
  const std::string real = "/tmp/gpumem-" + std::to_string(uid + 1);  // a real 0700 directory, but root's
  struct Cleanup {
    std::string paths;
    ~Cleanup() { std::system(("rm -rf " + paths).c_str()); }
  } cleanup{victim + " " + link + " " + real};
  ASSERT_EQ(symlink(victim.c_str(), link.c_str()), 0);
  ASSERT_EQ(mkdir(real.c_str(), 0700), 0);
  const std::string planted2 = real + "/4243.sock";
  close(open(planted2.c_str(), O_CREAT | O_WRONLY, 0600));
  for (const std::string& dir : candidate_socket_dirs(true)) {
    EXPECT_NE(dir, link) << "a symlink taken for a user's directory";
    EXPECT_NE(dir, real) << "a directory not owned by the uid in its name";
  }
  (void)list_processes(true);
  const std::string out = std::get<1>(shell(kGpumem + " stats --all 2>&1"));
  EXPECT_EQ(access(planted.c_str(), F_OK), 0) << "deleted through a symlink: " << out;
  EXPECT_EQ(access(planted2.c_str(), F_OK), 0) << out;
  // The owner's own stale socket is still cleared by the owner's own scan (StaleSocketsAreRemovedNotTrusted).
}

// A process in another pid namespace (a container sharing GPUMEM_CONTROL_DIR) names its socket by its pid
// there. It is listed and reached by the pid it has here; its socket is never taken for stale (a host's
// `stats --all` removed it: the name's pid did not exist here).
TEST(ControlProcess, AProcessNamingItsSocketByAnotherPidIsListedByItsOwn) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 4194304"), "ok");
  const std::string mine = dir.path + "/" + std::to_string(t.pid()) + ".sock";
  const std::string theirs = dir.path + "/999999.sock";  // no such pid here
  ASSERT_EQ(rename(mine.c_str(), theirs.c_str()), 0);
  const std::vector<ProcessRef> listed = list_processes();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].pid, t.pid());
  EXPECT_EQ(access(theirs.c_str(), F_OK), 0) << "a live socket was removed";
  EXPECT_EQ(stats(t.pid()).devices.at(0).allocated_bytes, 4 * MiB);
  auto [rc, out] = shell(kGpumem + " stats --all --json");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"pid\": " + std::to_string(t.pid())), std::string::npos) << out;
  // Planted under a second name: listed once.
  ASSERT_EQ(link(theirs.c_str(), mine.c_str()), 0);
  EXPECT_EQ(list_processes().size(), 1u);
  unlink(theirs.c_str());
}

TEST(ControlProcess, AllWithNobodyToAskSaysSo) {
  ControlDir dir;
  auto [rc, out] = shell(kGpumem + " stats --all 2>&1");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("no gpumem process"), std::string::npos) << "printed nothing at all: " << out;
  std::tie(rc, out) = shell(kGpumem + " stats --all --json 2>&1");
  EXPECT_EQ(out, "[]\n") << "--json stays a plain empty list";
}

TEST(ControlProcess, AnotherUserIsRefused) {
  if (geteuid() != 0 || std::system("command -v setpriv >/dev/null") != 0) GTEST_SKIP() << "needs root and setpriv";
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  std::string as_nobody = "setpriv --reuid=nobody --regid=nogroup --clear-groups env GPUMEM_CONTROL_DIR=" + dir.path +
                          " " + kGpumem;
  // The 0700 directory keeps nobody out.
  auto [rc, out] = shell(as_nobody + " stats " + std::to_string(t.pid()) + " 2>&1");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("another user"), std::string::npos) << out;
  // Even with the directory and socket opened up, the server checks the caller's uid.
  chmod(dir.path.c_str(), 0755);
  chmod((dir.path + "/" + std::to_string(t.pid()) + ".sock").c_str(), 0666);
  auto [rc2, out2] = shell(as_nobody + " clear " + std::to_string(t.pid()) + " 2>&1");
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("another user"), std::string::npos) << out2;
  EXPECT_EQ(t.ask("alloc 1024"), "ok");  // the program goes on
}

TEST(ControlProcess, CooperativeReleaseAcrossProcessesOnOneDevice) {
  ControlDir dir;
  std::string shared = dir.path + "/device";
  std::vector<std::string> env = {"GPUMEM_HOST_CAPACITY=64MiB", "GPUMEM_HOST_SHARED=" + shared};
  Target a(env);
  ASSERT_EQ(a.ask("alloc 8388608"), "ok");   // 8 MiB live in A
  ASSERT_EQ(a.ask("alloc 41943040"), "ok");  // 40 MiB cached in A
  ASSERT_EQ(a.ask("free"), "ok");
  Target b(env);
  EXPECT_EQ(b.ask("alloc 33554432"), "ok");  // 32 MiB: fits only once A gives its cache back
  nlohmann::json sa = a.self_stats();
  EXPECT_EQ(sa["allocated"], 8 * MiB);  // A's live memory untouched
  EXPECT_EQ(sa["reserved"], 8 * MiB);
  EXPECT_EQ(b.self_stats()["allocated"], 32 * MiB);
  EXPECT_EQ(b.ask("alloc 33554432"), "oom");  // nothing cached left anywhere: a real OOM

  Target c({"GPUMEM_HOST_CAPACITY=64MiB", "GPUMEM_HOST_SHARED=" + shared, "GPUMEM_COOPERATIVE=0"});
  ASSERT_EQ(b.ask("free"), "ok");            // B caches 32 MiB now
  EXPECT_EQ(c.ask("alloc 33554432"), "oom");  // C does not ask
}

TEST(ControlProcess, StopEndsAProgramWithoutAHandler) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  auto [rc, out] = shell(kGpumem + " stop --json --timeout 5 " + std::to_string(t.pid()));
  EXPECT_EQ(rc, 0) << out;
  int status = t.wait_exit();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
}

TEST(ControlProcess, PsAndInfoShowWhatNvmlChargesBeyondTheAllocator) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 10485760"), "ok");  // 10 MiB live, 10 MiB reserved (+2 MiB small pool cached)
  std::int64_t reserved = t.self_stats()["reserved"];
  std::string scenario = "gpu name=\"NVIDIA H100 80GB HBM3\" total_mib=81559 reserved_mib=512 used_mib=1500\n"
                         "proc gpu=0 pid=" + std::to_string(t.pid()) + " used_mib=600\n";
  std::string env = "GPUMEM_NVML_LIBRARY=" + gpumem::testing::fake_nvml_path() + " GPUMEM_FAKE_NVML_SCENARIO=" +
                    gpumem::testing::write_scenario("control_ps", scenario) + " ";
  for (const char* command : {"ps", "info"}) {
    auto [rc, out] = shell("env " + env + kGpumem + " " + command + " --json");
    ASSERT_EQ(rc, 0) << out;
    auto rows = nlohmann::json::parse(out)["gpumem_allocators"];
    ASSERT_EQ(rows.size(), 1u) << command;
    EXPECT_EQ(rows[0]["pid"], t.pid());
    EXPECT_EQ(rows[0]["allocated_bytes"], 10 * MiB);
    EXPECT_EQ(rows[0]["reserved_bytes"], reserved);
    EXPECT_EQ(rows[0]["beyond_reserved_bytes"].get<std::int64_t>(), 600 * MiB - reserved) << command;
  }
  auto [rc, text] = shell("env " + env + kGpumem + " ps");
  EXPECT_NE(text.find("BEYOND RESERVED"), std::string::npos) << text;
}

}  // namespace
}  // namespace gpumem::control
