// The pickle writer (round trip through python3's pickle), the PyTorch snapshot renderer (checked
// against PyTorch's own snapshot, tests/data/native_snapshot.pickle) and memory history.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem_history.h"
#include "gpumem/host_backend.hpp"
#include "gpumem/memory.hpp"
#include "report/history.hpp"
#include "report/pickle_writer.hpp"
#include "report/torch_snapshot.hpp"

namespace gpumem::report {
namespace {

std::string temp_path(const std::string& name) { return "/tmp/gpumem-report-" + std::to_string(getpid()) + name; }

// Runs a shell command; returns its stdout and puts its status in *status.
std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  *status = pclose(p);
  return out;
}

TEST(PickleWriter, RoundTripsThroughPython) {
  const std::string path = temp_path(".pickle");
  {
    std::ofstream f(path, std::ios::binary);
    PickleWriter w(f);
    w.begin_dict();
    w.key("ints");
    w.begin_list();
    for (std::int64_t v : std::initializer_list<std::int64_t>{0LL, 255LL, 256LL, 65535LL, 65536LL, -1LL, -129LL, 2147483647LL, 2147483648LL,
                           -2147483649LL, 140190951669760LL, std::int64_t(INT64_MIN)})
      w.integer(v);
    w.unsigned_integer(UINT64_MAX);
    w.end_list();
    w.key("text");
    w.str("h\xc3\xa9llo");
    w.key("float");
    w.number(-2.5);
    w.key("flags");
    w.begin_list();
    w.boolean(true);
    w.boolean(false);
    w.none();
    w.tuple2_int(0, 7);
    w.end_list();
    w.key("many");
    w.begin_list();
    for (int i = 0; i < 2500; ++i) w.integer(i);
    w.end_list();
    w.key("big_dict");
    w.begin_dict();
    for (int i = 0; i < 1500; ++i) {
      w.key(std::to_string(i));
      w.begin_list();
      w.end_list();
    }
    w.end_dict();
    w.end_dict();
    w.finish();
  }
  int status = -1;
  std::string out = run("python3 -c \"import pickle,sys; d=pickle.load(open('" + path +
                            "','rb')); m=d['many']; b=d['big_dict']; print(d['ints'], d['text'], d['float'], "
                            "d['flags'], m==list(range(2500)), len(b), b['1499'])\"",
                        &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out,
            "[0, 255, 256, 65535, 65536, -1, -129, 2147483647, 2147483648, -2147483649, 140190951669760, "
            "-9223372036854775808, 18446744073709551615] h\xc3\xa9llo -2.5 [True, False, None, (0, 7)] True 1500 []\n");
  std::remove(path.c_str());
}

TEST(PickleWriter, MisuseIsALogicError) {
  std::ostringstream out;
  PickleWriter w(out);
  EXPECT_THROW(w.end_list(), std::logic_error);
  w.begin_dict();
  w.key("k");
  EXPECT_THROW(w.end_dict(), std::logic_error);
  EXPECT_THROW(w.finish(), std::logic_error);
}

class History : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_backend_factory([](int device) {
      HostBackendOptions o;
      o.capacity = std::size_t(256) << 20;
      o.device = device;
      return std::make_shared<HostBackend>(o);
    });
  }
};

void frames_for_test() { gpumem_history_set_frames("train.py\x1f" "42\x1fstep\x1e" "train.py\x1f" "7\x1f<module>"); }

TEST_F(History, SnapshotHasPyTorchsKeysTypesAndActions) {
  ASSERT_EQ(gpumem_history_start(100000, 1, 1, frames_for_test), GPUMEM_OK) << gpumem_last_error();
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(gpumem_allocate(4000, 0, nullptr, &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(12 << 20, 0, nullptr, &b), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(16384, 0, reinterpret_cast<void*>(99), &c), GPUMEM_OK);
  ASSERT_EQ(gpumem_deallocate(b, 0, nullptr), GPUMEM_OK);
  gpumem_empty_cache();
  void* huge = nullptr;
  EXPECT_EQ(gpumem_allocate(std::size_t(1) << 40, 0, nullptr, &huge), GPUMEM_E_OOM);
  const std::string path = temp_path("-torch.pickle");
  ASSERT_EQ(gpumem_snapshot_write(path.c_str()), GPUMEM_OK) << gpumem_last_error();
  int status = -1;
  std::string out = run("python3 " GPUMEM_SOURCE_DIR "/tests/report/check_torch_snapshot.py " + path +
                            " " GPUMEM_SOURCE_DIR "/tests/data/native_snapshot.pickle alloc free_requested "
                            "free_completed segment_map segment_unmap oom --frames 2>&1",
                        &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find("FAIL"), std::string::npos) << out;
  EXPECT_NE(out.find("PASS keys and types match"), std::string::npos) << out;

  std::size_t len = 0;
  void* bytes = gpumem_snapshot_pickle(&len);
  ASSERT_NE(bytes, nullptr) << gpumem_last_error();
  EXPECT_GT(len, 100u);
  EXPECT_EQ(static_cast<unsigned char*>(bytes)[0], 0x80);
  gpumem_buffer_free(bytes);

  ASSERT_EQ(gpumem_history_stop(), GPUMEM_OK);
  ASSERT_EQ(gpumem_history_clear(), GPUMEM_OK);
  EXPECT_TRUE(process_history().torch_snapshot().traces.empty());
  gpumem_deallocate(a, 0, nullptr);
  gpumem_deallocate(c, 0, reinterpret_cast<void*>(99));
  EXPECT_EQ(gpumem_snapshot_write("/nonexistent-dir/s.pickle"), GPUMEM_E_INTERNAL);
  EXPECT_NE(std::string(gpumem_last_error()).find("/nonexistent-dir/s.pickle"), std::string::npos);
  std::remove(path.c_str());
}

// Each device's events in its own trace, also for a device first used after the history started (they
// were recorded nowhere, or under device 0 on the host and sim backends).
TEST_F(History, EachDeviceHasItsOwnTraceEvenWhenFirstUsedLater) {
  ASSERT_EQ(gpumem_history_start(1000, 1, 0, nullptr), GPUMEM_OK);
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(gpumem_allocate(5000, 0, nullptr, &a), GPUMEM_OK);
  ASSERT_EQ(gpumem_allocate(3000000, 5, nullptr, &b), GPUMEM_OK);  // device 5's first allocation
  TorchSnapshotInput in = process_history().torch_snapshot();
  ASSERT_EQ(in.traces.size(), 6u);
  const auto has = [](const std::vector<TraceEntry>& t, EventKind kind, std::size_t size) {
    return std::any_of(t.begin(), t.end(), [&](const TraceEntry& e) { return e.kind == kind && e.size == size; });
  };
  EXPECT_TRUE(has(in.traces[0], EventKind::alloc, 5000));
  EXPECT_TRUE(has(in.traces[5], EventKind::alloc, 3000000));
  EXPECT_FALSE(has(in.traces[0], EventKind::alloc, 3000000)) << "device 5's allocation under device 0";
  gpumem_history_stop();
  gpumem_history_clear();
  gpumem_deallocate(a, 0, nullptr);
  gpumem_deallocate(b, 5, nullptr);
}

TEST_F(History, MaxEntriesKeepsTheLastEvents) {
  ASSERT_EQ(gpumem_history_start(3, 1, 0, nullptr), GPUMEM_OK);
  for (int i = 0; i < 10; ++i) {
    void* p = nullptr;
    ASSERT_EQ(gpumem_allocate(512 * (i + 1), 0, nullptr, &p), GPUMEM_OK);
    gpumem_deallocate(p, 0, nullptr);
  }
  TorchSnapshotInput in = process_history().torch_snapshot();
  ASSERT_EQ(in.traces.size(), 1u);
  ASSERT_EQ(in.traces[0].size(), 3u);
  EXPECT_EQ(in.traces[0].back().kind, EventKind::free_completed);
  EXPECT_EQ(in.traces[0].back().size, 5120u);
  gpumem_history_stop();
  gpumem_history_clear();
  std::ostringstream json;
  write_process_snapshot(json, SnapshotFormat::gpumem_json);
  EXPECT_EQ(json.str().rfind("{\"version\":1,\"devices\":[{", 0), 0u) << json.str().substr(0, 80);
  EXPECT_NE(json.str().find("\"state\":\"free\""), std::string::npos);
  const std::string path = temp_path(".json");
  std::ofstream(path) << json.str();
  int status = -1;
  std::string out = run("python3 -c \"import json; d=json.load(open('" + path +
                            "')); print(len(d['devices'][0]['regions']) > 0, 'allocated_bytes.all.current' in "
                            "d['devices'][0]['stats'])\"",
                        &status);
  EXPECT_EQ(out, "True True\n");
  std::remove(path.c_str());
}

}  // namespace
}  // namespace gpumem::report
