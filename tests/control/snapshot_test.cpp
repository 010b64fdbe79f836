// `gpumem snapshot PID -o FILE` against real gpumem processes (tests/control/control_target.cpp on the host
// backend): the pickle loads in python3 and holds the child's live blocks at their addresses and sizes, and
// matches PyTorch's own snapshot key by key; the JSON likewise; errors get one sentence and their exit code.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>

#include "control/client.hpp"
#include "control/target_process.hpp"

namespace gpumem::control {
namespace {

using test_support::ControlDir;
using test_support::kGpumem;
using test_support::MiB;
using test_support::shell;
using test_support::Target;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::int64_t file_size(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? std::int64_t(st.st_size) : -1;
}

// The pickle as python3 reads it: {"segments": n, "active": [[address, size, requested], ...] sorted,
// "traces": [[action, addr, size, [frame names]], ...] of device 0}.
nlohmann::json load_pickle(const std::string& path) {
  auto [rc, out] = shell(
      "python3 -c \"import pickle,json,sys; d=pickle.load(open(sys.argv[1],'rb')); "
      "act=sorted([b['address'],b['size'],b['requested_size']] for s in d['segments'] for b in s['blocks'] "
      "if b['state']=='active_allocated'); "
      "tr=[[e['action'],e.get('addr',0),e['size'],[f['filename']+':'+str(f['line']) for f in e['frames']]] "
      "for e in (d['device_traces'][0] if d['device_traces'] else [])]; "
      "print(json.dumps({'segments':len(d['segments']),'active':act,'traces':tr}))\" " + path + " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

TEST(ControlSnapshot, PickleHoldsTheLiveBlocksAndReadsAsPyTorchs) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 5000000"), "ok");
  std::uint64_t big = std::stoull(t.ask("addr"));
  ASSERT_EQ(t.ask("alloc 123"), "ok");
  std::uint64_t small = std::stoull(t.ask("addr"));
  ASSERT_EQ(t.ask("alloc 3145728"), "ok");
  ASSERT_EQ(t.ask("free"), "ok");  // 3 MiB cached: in the snapshot as an inactive block
  std::string file = dir.path + "/out.pickle";
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file + " --json");
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json summary = nlohmann::json::parse(out);
  EXPECT_EQ(summary["pid"], t.pid());
  EXPECT_EQ(summary["file"], file);
  EXPECT_EQ(summary["format"], "pickle");
  EXPECT_EQ(summary["bytes"].get<std::int64_t>(), file_size(file));
  EXPECT_EQ(summary["active_blocks"], 2);

  nlohmann::json seen = load_pickle(file);
  ASSERT_TRUE(seen.is_object());
  EXPECT_EQ(seen["segments"], summary["segments"]);
  nlohmann::json expected = nlohmann::json::array();
  expected.push_back({small, 512, 123});  // small pool: 512-byte rounding
  expected.push_back({big, 5000192, 5000000});
  if (small > big) std::swap(expected[0], expected[1]);
  EXPECT_EQ(seen["active"], expected);

  auto [check_rc, check] = shell("python3 " GPUMEM_SOURCE_DIR "/tests/report/check_torch_snapshot.py " + file +
                                 " " GPUMEM_SOURCE_DIR "/tests/data/native_snapshot.pickle 2>&1");
  EXPECT_EQ(check_rc, 0) << check;
}

TEST(ControlSnapshot, JsonHoldsTheLiveBlocks) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 7340032"), "ok");  // 7 MiB
  std::uint64_t addr = std::stoull(t.ask("addr"));
  std::string file = dir.path + "/out.json";  // the name picks the format
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file + " --device 0 --json");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(nlohmann::json::parse(out)["format"], "json");
  nlohmann::json doc = nlohmann::json::parse(read_file(file), nullptr, false);
  ASSERT_TRUE(doc.is_object());
  ASSERT_EQ(doc["devices"].size(), 1u);
  const nlohmann::json& dev = doc["devices"][0];
  EXPECT_EQ(dev["backend"], "host");
  EXPECT_EQ(dev["allocated"], t.self_stats()["allocated"]);
  int found = 0;
  for (const auto& region : dev["regions"])
    for (const auto& b : region["blocks"])
      if (b["state"] == "allocated" && b["address"] == addr) {
        EXPECT_EQ(b["size"], 7 * MiB);
        EXPECT_EQ(b["requested"], 7 * MiB);
        ++found;
      }
  EXPECT_EQ(found, 1);
}

TEST(ControlSnapshot, HistoryTraceAndFramesTravelWithIt) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("history 100"), "ok");
  ASSERT_EQ(t.ask("framed 4194304"), "ok");
  std::uint64_t addr = std::stoull(t.ask("addr"));
  ASSERT_EQ(t.ask("alloc 1048576"), "ok");
  ASSERT_EQ(t.ask("free"), "ok");
  std::string file = dir.path + "/history.pkl";
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("pickle snapshot written to " + file), std::string::npos) << out;
  nlohmann::json seen = load_pickle(file);
  ASSERT_TRUE(seen.is_object());
  bool framed_alloc = false, freed = false;
  for (const auto& e : seen["traces"]) {
    framed_alloc |= e[0] == "alloc" && e[1] == addr && e[2] == 4 * MiB && e[3] == nlohmann::json{"train.py:42"};
    freed |= e[0] == "free_requested" && e[2] == MiB;
  }
  EXPECT_TRUE(framed_alloc) << seen.dump();
  EXPECT_TRUE(freed) << seen.dump();
}

// With history on, the snapshot is the history's (report/history.cpp): each device keeps its number, and
// --device picks one (every device was labelled 0 there before).
TEST(ControlSnapshot, HistoryKeepsEachDevicesNumber) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 4194304"), "ok");
  ASSERT_EQ(t.ask("allocon 1 1048576"), "ok");  // device 1's allocator
  ASSERT_EQ(t.ask("history 100"), "ok");
  std::string file = dir.path + "/all.json";
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file);
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json doc = nlohmann::json::parse(read_file(file), nullptr, false);
  ASSERT_TRUE(doc.is_object());
  ASSERT_EQ(doc["devices"].size(), 2u);
  EXPECT_EQ(doc["devices"][0]["device"], 0);
  EXPECT_EQ(doc["devices"][1]["device"], 1);
  std::string one = dir.path + "/one.json";
  auto [rc1, out1] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + one + " --device 1");
  ASSERT_EQ(rc1, 0) << out1;
  nlohmann::json only = nlohmann::json::parse(read_file(one), nullptr, false);
  ASSERT_EQ(only["devices"].size(), 1u);
  EXPECT_EQ(only["devices"][0]["device"], 1);
}

// Tens of thousands of blocks: the document is many chunks long and arrives whole.
TEST(ControlSnapshot, LargeSnapshotsArriveWhole) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("allocn 30000 512"), "ok");
  std::string file = dir.path + "/large.pickle";
  auto start = std::chrono::steady_clock::now();
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file + " --json");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json summary = nlohmann::json::parse(out);
  EXPECT_GT(summary["bytes"].get<std::int64_t>(), std::int64_t(4 * kSnapshotChunkBytes));
  EXPECT_EQ(summary["bytes"].get<std::int64_t>(), file_size(file));
  EXPECT_GE(summary["active_blocks"].get<std::int64_t>(), 30000);
  nlohmann::json seen = load_pickle(file);
  ASSERT_TRUE(seen.is_object());
  EXPECT_EQ(seen["active"].size(), summary["active_blocks"].get<std::size_t>());
  std::printf("snapshot of %lld blocks: %lld bytes in %.3f s\n", (long long)summary["blocks"].get<std::int64_t>(),
              (long long)summary["bytes"].get<std::int64_t>(), seconds);
}

TEST(ControlSnapshot, ErrorsGetOneSentenceAndLeaveTheFileAlone) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  std::string pid = std::to_string(t.pid());
  std::string kept = dir.path + "/kept.pickle";
  { std::ofstream(kept) << "old"; }

  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  auto [gone_rc, gone_out] = shell(kGpumem + " snapshot " + std::to_string(gone) + " -o " + kept + " 2>&1");
  EXPECT_EQ(gone_rc, 1);
  EXPECT_NE(gone_out.find("does not exist"), std::string::npos) << gone_out;
  EXPECT_EQ(read_file(kept), "old");  // a failed snapshot replaces nothing

  auto [dir_rc, dir_out] = shell(kGpumem + " snapshot " + pid + " -o " + dir.path + "/no/such/dir.pickle 2>&1");
  EXPECT_EQ(dir_rc, 1);
  EXPECT_NE(dir_out.find("cannot write"), std::string::npos) << dir_out;
  auto [isdir_rc, isdir_out] = shell(kGpumem + " snapshot " + pid + " -o " + dir.path + " 2>&1");
  EXPECT_EQ(isdir_rc, 1);
  EXPECT_NE(isdir_out.find("cannot write"), std::string::npos) << isdir_out;

  // A file that exists but cannot be replaced (a kernel file): the sentence is about it, not about the
  // temporary beside it that could not be made ("No such file or directory" for a file that exists).
  auto [proc_rc, proc_out] = shell(kGpumem + " snapshot " + pid + " -o /proc/version 2>&1");
  EXPECT_EQ(proc_rc, 1);
  EXPECT_EQ(proc_out.rfind("gpumem snapshot: cannot write /proc/version: ", 0), 0u) << proc_out;
  EXPECT_TRUE(proc_out.find("Permission denied") != std::string::npos ||
              proc_out.find("/proc takes no new file") != std::string::npos) << proc_out;

  auto [fmt_rc, fmt_out] = shell(kGpumem + " snapshot " + pid + " -o " + kept + " --format xml 2>&1");
  EXPECT_EQ(fmt_rc, 2);
  EXPECT_NE(fmt_out.find("pickle or json"), std::string::npos) << fmt_out;
  auto [both_rc, both_out] = shell(kGpumem + " snapshot " + pid + " -o - --json 2>&1");
  EXPECT_EQ(both_rc, 2) << both_out;
  auto [empty_rc, empty_out] = shell(kGpumem + " snapshot " + pid + " -o '' 2>&1");
  EXPECT_EQ(empty_rc, 2) << empty_out;
  auto [dev_rc, dev_out] = shell(kGpumem + " snapshot " + pid + " -o " + kept + " --device 7 2>&1");
  EXPECT_EQ(dev_rc, 1);
  EXPECT_NE(dev_out.find("no allocator on device 7"), std::string::npos) << dev_out;
  EXPECT_EQ(read_file(kept), "old");

  Target off({"GPUMEM_CONTROL=0"});
  auto [off_rc, off_out] = shell(kGpumem + " snapshot " + std::to_string(off.pid()) + " -o " + kept + " 2>&1");
  EXPECT_EQ(off_rc, 1);
  EXPECT_NE(off_out.find("GPUMEM_CONTROL=0"), std::string::npos) << off_out;

  // No temporary is left behind by any of these, and the program goes on.
  auto [ls_rc, ls_out] = shell("ls -A " + dir.path);
  EXPECT_EQ(ls_out.find(".gpumem-"), std::string::npos) << ls_out;
  EXPECT_EQ(t.ask("alloc 1024"), "ok");
}

TEST(ControlSnapshot, AnotherUserIsRefused) {
  if (geteuid() != 0 || std::system("command -v setpriv >/dev/null") != 0) GTEST_SKIP() << "needs root and setpriv";
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  chmod(dir.path.c_str(), 0755);  // even with the socket reachable, the server checks the caller's uid
  chmod((dir.path + "/" + std::to_string(t.pid()) + ".sock").c_str(), 0666);
  std::string file = "/tmp/gpumem-snapshot-nobody-" + std::to_string(getpid()) + ".pickle";
  auto [rc, out] = shell("setpriv --reuid=nobody --regid=nogroup --clear-groups env GPUMEM_CONTROL_DIR=" + dir.path +
                         " " + kGpumem + " snapshot " + std::to_string(t.pid()) + " -o " + file + " 2>&1");
  EXPECT_EQ(rc, 1);
  EXPECT_NE(out.find("another user"), std::string::npos) << out;
  EXPECT_EQ(file_size(file), -1);  // nothing written
  auto [ls_rc, ls_out] = shell("ls -A /tmp | grep -c 'gpumem-snapshot-nobody-" + std::to_string(getpid()) + "'");
  EXPECT_EQ(ls_out, "0\n");  // nor a temporary left behind
}

TEST(ControlSnapshot, StdoutTakesTheDocument) {
  ControlDir dir;
  Target t({"GPUMEM_HOST_CAPACITY=256MiB"});
  ASSERT_EQ(t.ask("alloc 2097152"), "ok");
  auto [rc, out] = shell(kGpumem + " snapshot " + std::to_string(t.pid()) + " -o - --format json");
  ASSERT_EQ(rc, 0) << out;
  nlohmann::json doc = nlohmann::json::parse(out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << out.substr(0, 200);
  EXPECT_EQ(doc["devices"][0]["allocated"], 2 * MiB);
}

}  // namespace
}  // namespace gpumem::control
