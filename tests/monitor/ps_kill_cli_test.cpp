// gpumem ps / kill against real child processes: one with an "NVML context" (listed by the test
// double), one holding a stand-in device node without a context, and an NVML entry whose PID is gone.
#include <sys/stat.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>

#include "monitor/kill.hpp"
#include "monitor/procfs.hpp"
#include "monitor/run_gpumem.hpp"
#include "nvml/fake_nvml_env.hpp"

using namespace gpumem::testing;

namespace {

// A child running `script` under /bin/sh; killed and reaped when the test ends.
class Child {
 public:
  explicit Child(const std::string& script) {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      reap();
    }
  }
  int pid() const { return pid_; }
  // Waits for the child to end; its exit status (128+signal when killed).
  int reap() {
    int st = 0;
    if (pid_ <= 0 || waitpid(pid_, &st, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  }
  bool running() const {
    std::string stat = slurp("/proc/" + std::to_string(pid_) + "/stat");
    size_t close = stat.rfind(')');
    return close != std::string::npos && stat[close + 2] != 'Z';
  }

 private:
  pid_t pid_ = -1;
};

// Waits until the child's exec has happened (its command line changed) so /proc shows the final image.
// Until the child's shell has exec'd `sleep NEEDLE` (the shell's own command line holds NEEDLE too).
void wait_for_exec(const Child& c, const std::string& needle) {
  const std::string execd = std::string("sleep") + '\0' + needle;
  for (int i = 0; i < 500; ++i) {
    if (slurp("/proc/" + std::to_string(c.pid()) + "/cmdline").find(execd) != std::string::npos) return;
    usleep(2000);
  }
}

int dead_pid() {
  Child c("exit 0");
  int pid = c.pid();
  c.reap();
  return pid;
}

class PsKill : public ::testing::Test {
 protected:
  void SetUp() override {
    dev_ = std::filesystem::temp_directory_path() / ("gpumem-dev-" + std::to_string(getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dev_);
    for (const char* n : {"nvidia0", "nvidia1", "nvidiactl"}) std::ofstream(dev_ / n) << "";
  }
  void TearDown() override { std::filesystem::remove_all(dev_); }

  std::map<std::string, std::string> env(const std::string& scenario) {
    return {{"GPUMEM_NVML_LIBRARY", fake_nvml_path()},
            {"GPUMEM_FAKE_NVML_SCENARIO", write_scenario(::testing::UnitTest::GetInstance()->current_test_info()->name(), scenario)},
            {"GPUMEM_DEV_DIR", dev_.string()}};
  }
  std::string holder_script() const { return "exec 3<" + (dev_ / "nvidia0").string() + "; exec sleep 300"; }

  std::filesystem::path dev_;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

std::string collapse_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (!(c == ' ' && !out.empty() && out.back() == ' ')) out += c;
  return out;
}

}  // namespace

TEST_F(PsKill, PsShowsContextsHoldersAndGhosts) {
  Child worker("exec sleep 301");
  Child holder(holder_script());
  wait_for_exec(worker, "301");
  wait_for_exec(holder, "300");
  int gone = dead_pid();
  std::string scenario = "gpu name=\"NVIDIA H100 80GB HBM3\" total_mib=81559 reserved_mib=512 used_mib=1500\n"
                         "gpu name=\"NVIDIA H100 80GB HBM3\" used_mib=0\n"
                         "proc gpu=0 pid=" + std::to_string(worker.pid()) + " used_mib=1000\n"
                         "proc gpu=0 pid=" + std::to_string(gone) + " used_mib=300\n";
  auto r = run_gpumem({"ps"}, env(scenario));
  ASSERT_EQ(r.status, 0) << r.err;
  std::string text = r.out;
  text = replace_all(text, " " + std::to_string(worker.pid()) + " ", " <WORKER> ");
  text = replace_all(text, " " + std::to_string(holder.pid()) + " ", " <HOLDER> ");
  text = replace_all(text, " " + std::to_string(gone) + " ", " <GONE> ");
  text = replace_all(text, dev_.string(), "<DEV>");
  text = replace_all(text, " " + gpumem::monitor::user_name(geteuid()) + " ", " <USER> ");
  // Unreadable fd directories depend on who runs the test; drop that note.
  text = text.substr(0, text.find("Note: the open files"));
  expect_golden("ps.txt", collapse_spaces(text));

  auto j = run_gpumem({"ps", "--json"}, env(scenario));
  ASSERT_EQ(j.status, 0);
  auto doc = nlohmann::json::parse(j.out);
  std::map<int, std::string> kinds;
  for (const auto& p : doc["processes"]) kinds[p["pid"].get<int>()] = p["kind"].get<std::string>();
  EXPECT_EQ(kinds[worker.pid()], "context");
  EXPECT_EQ(kinds[holder.pid()], "no_context");
  EXPECT_EQ(kinds[gone], "gone");
  EXPECT_EQ(doc["gpus"][0]["unexplained_bytes"].get<long long>(), 200ll << 20);
}

TEST_F(PsKill, KillTermThenReport) {
  Child worker("exec sleep 302");
  wait_for_exec(worker, "302");
  const int pid = worker.pid();
  auto r = run_gpumem({"kill", std::to_string(worker.pid()), "--timeout", "5"}, env(""));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(worker.reap(), 128 + SIGTERM);
  EXPECT_EQ(collapse_spaces(replace_all(r.out, std::to_string(pid), "<PID>")).substr(0, 44),
            "PID <PID> (sleep 302): exited on SIGTERM aft");
}

// A process chosen from a listing (top's prompt, --gpu, --user) carries its start time: when its PID
// belongs to another process by the time the signal goes (the listed one ended, its PID was reused),
// that other process is not signalled. Here the "listed" one is the child as it was 1 tick earlier.
TEST_F(PsKill, APidReusedSinceItWasListedIsNotSignalled) {
  Child worker("exec sleep 306");
  wait_for_exec(worker, "306");
  const auto now = gpumem::monitor::read_process(worker.pid());
  ASSERT_TRUE(now);
  const auto listed = now->start_time - 1;
  auto out = gpumem::monitor::kill_processes({gpumem::monitor::KillTarget{worker.pid(), listed}}, {});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].result, gpumem::monitor::KillResult::kNoSuchProcess) << out[0].detail;
  EXPECT_NE(out[0].detail.find("now belongs to another process"), std::string::npos) << out[0].detail;
  EXPECT_TRUE(worker.running());
  // The same process as listed is signalled.
  gpumem::monitor::KillOptions quick;
  quick.timeout_s = 5;
  out = gpumem::monitor::kill_processes({gpumem::monitor::KillTarget{worker.pid(), now->start_time}}, quick);
  EXPECT_EQ(out[0].result, gpumem::monitor::KillResult::kExited) << out[0].detail;
  EXPECT_EQ(worker.reap(), 128 + SIGTERM);
}

TEST_F(PsKill, APidGivenTwiceIsSignalledOnce) {
  Child worker("exec sleep 304");
  wait_for_exec(worker, "304");
  const std::string pid = std::to_string(worker.pid());
  auto r = run_gpumem({"kill", pid, pid, "--timeout", "5"}, env(""));
  EXPECT_EQ(r.status, 0) << r.out << r.err;  // was 5: the second time "no such process"
  EXPECT_EQ(worker.reap(), 128 + SIGTERM);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST_F(PsKill, KillEscalatesToSigkill) {
  Child stubborn("trap '' TERM; exec sleep 303");  // an ignored signal stays ignored across exec
  wait_for_exec(stubborn, "303");
  auto r = run_gpumem({"kill", std::to_string(stubborn.pid()), "--timeout", "0.2"}, env(""));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("killed with SIGKILL"), std::string::npos) << r.out;
  EXPECT_EQ(stubborn.reap(), 128 + SIGKILL);
}

TEST_F(PsKill, KillRefusesInitParentAndGone) {
  int gone = dead_pid();
  // The test process is gpumem's parent.
  auto r = run_gpumem({"kill", "1", std::to_string(getpid()), std::to_string(gone), "--json"}, env(""));
  EXPECT_EQ(r.status, 5);
  auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc.size(), 3u);
  EXPECT_EQ(doc[0]["result"], "refused");
  EXPECT_EQ(doc[1]["result"], "refused");
  EXPECT_EQ(doc[1]["detail"], "refused: that is gpumem's parent process");
  EXPECT_EQ(doc[2]["result"], "no_such_process");
}

TEST_F(PsKill, KillGhostsDryRunThenForReal) {
  Child worker("exec sleep 304");
  Child holder(holder_script());
  wait_for_exec(worker, "304");
  wait_for_exec(holder, "300");
  std::string scenario = "gpu used_mib=10\ngpu\nproc gpu=0 pid=" + std::to_string(worker.pid()) + " used_mib=5\n";
  auto dry = run_gpumem({"kill", "--ghosts", "--dry-run"}, env(scenario));
  EXPECT_EQ(dry.status, 0);
  EXPECT_EQ(dry.out, "PID " + std::to_string(holder.pid()) + " (sleep 300): would send SIGTERM\n");
  EXPECT_TRUE(holder.running());
  auto real = run_gpumem({"kill", "--ghosts", "--timeout", "5"}, env(scenario));
  EXPECT_EQ(real.status, 0) << real.out;
  EXPECT_EQ(holder.reap(), 128 + SIGTERM);
  EXPECT_TRUE(worker.running());
}

TEST_F(PsKill, KillByGpuAndUser) {
  Child on0("exec sleep 305");
  Child on1("exec sleep 306");
  wait_for_exec(on0, "305");
  wait_for_exec(on1, "306");
  std::string scenario = "gpu\ngpu\nproc gpu=0 pid=" + std::to_string(on0.pid()) + " used_mib=5\nproc gpu=1 pid=" +
                         std::to_string(on1.pid()) + " used_mib=5\n";
  auto r = run_gpumem({"kill", "--gpu", "1", "--user", std::to_string(geteuid()), "--timeout", "5"}, env(scenario));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(on1.reap(), 128 + SIGTERM);
  EXPECT_TRUE(on0.running());
  auto none = run_gpumem({"kill", "--gpu", "1"}, env(scenario));
  EXPECT_EQ(none.out, "No process matches.\n");
  auto bad = run_gpumem({"kill", "--user", "no-such-user-xyz"}, env(scenario));
  EXPECT_EQ(bad.status, 2);
  auto nothing = run_gpumem({"kill"}, env(scenario));
  EXPECT_EQ(nothing.status, 2);
  auto badsig = run_gpumem({"kill", "--signal", "BOGUS", "1"}, env(scenario));
  EXPECT_EQ(badsig.status, 2);
}


// Driver daemons are never chosen by --gpu, --user or --ghosts, though the kernel cuts their names to 15
// characters ("nvidia-persiste"): killing the fabric manager takes every GPU job down with it.
TEST_F(PsKill, DriverDaemonsAreNeverChosen) {
  const std::filesystem::path bin = dev_ / "bin";
  std::filesystem::create_directories(bin);
  for (const char* name : {"nvidia-persistenced", "nvidia-fabricmanager", "nv-hostengine"})
    std::filesystem::create_symlink("/bin/sleep", bin / name);
  Child persistenced("exec 3<" + (dev_ / "nvidia0").string() + "; exec " + (bin / "nvidia-persistenced").string() + " 307");
  Child fabric("exec " + (bin / "nvidia-fabricmanager").string() + " 308");
  Child hostengine("exec " + (bin / "nv-hostengine").string() + " 309");
  Child worker("exec sleep 310");
  for (int i = 0; i < 500 && gpumem::monitor::read_process(persistenced.pid())->comm != "nvidia-persiste"; ++i) usleep(2000);
  for (int i = 0; i < 500 && gpumem::monitor::read_process(fabric.pid())->comm != "nvidia-fabricma"; ++i) usleep(2000);
  for (int i = 0; i < 500 && gpumem::monitor::read_process(hostengine.pid())->comm != "nv-hostengine"; ++i) usleep(2000);
  wait_for_exec(worker, "310");
  std::string scenario = "gpu used_mib=10\ngpu\n";
  for (int pid : {fabric.pid(), hostengine.pid(), worker.pid()}) scenario += "proc gpu=0 pid=" + std::to_string(pid) + " used_mib=1\n";
  auto ps = run_gpumem({"ps", "--json"}, env(scenario));
  ASSERT_EQ(ps.status, 0) << ps.err;
  const auto doc = nlohmann::json::parse(ps.out);
  std::map<int, bool> daemon;
  for (const auto& p : doc["processes"]) daemon[p["pid"].get<int>()] = p["driver_daemon"].get<bool>();
  EXPECT_TRUE(daemon[persistenced.pid()]) << ps.out;
  EXPECT_TRUE(daemon[fabric.pid()]);
  EXPECT_TRUE(daemon[hostengine.pid()]);
  EXPECT_FALSE(daemon[worker.pid()]);
  const std::string only_worker = "PID " + std::to_string(worker.pid()) + " (sleep 310): would send SIGTERM\n";
  EXPECT_EQ(run_gpumem({"kill", "--gpu", "0", "--dry-run"}, env(scenario)).out, only_worker);
  EXPECT_EQ(run_gpumem({"kill", "--user", std::to_string(geteuid()), "--dry-run"}, env(scenario)).out, only_worker);
  EXPECT_EQ(run_gpumem({"kill", "--ghosts", "--dry-run"}, env(scenario)).out, "No process matches.\n");
  // Named, a daemon is the user's call.
  auto named = run_gpumem({"kill", std::to_string(fabric.pid()), "--dry-run"}, env(scenario));
  EXPECT_NE(named.out.find("PID " + std::to_string(fabric.pid())), std::string::npos) << named.out;
}

// --user narrows named PIDs too ("only processes of user U"), and chooses nobody else's when PIDs are named.
TEST_F(PsKill, UserNarrowsNamedPids) {
  Child mine("exec sleep 311");
  Child other("exec sleep 312");
  wait_for_exec(mine, "311");
  wait_for_exec(other, "312");
  const std::string scenario = "gpu\nproc gpu=0 pid=" + std::to_string(other.pid()) + " used_mib=1\n";
  const std::string nobody = std::to_string(geteuid() + 12345);  // a uid no process here runs as
  auto r = run_gpumem({"kill", std::to_string(mine.pid()), "--user", nobody, "--dry-run"}, env(scenario));
  EXPECT_EQ(r.status, 5) << "a named PID left alone is not all that was asked: " << r.err;
  EXPECT_EQ(r.out, "No process matches.\n");
  EXPECT_NE(r.err.find("PID " + std::to_string(mine.pid()) + " belongs to"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("left alone"), std::string::npos) << r.err;
  auto same = run_gpumem({"kill", std::to_string(mine.pid()), "--user", std::to_string(geteuid()), "--dry-run"}, env(scenario));
  EXPECT_EQ(same.out, "PID " + std::to_string(mine.pid()) + " (sleep 311): would send SIGTERM\n") << "named PIDs only, not every GPU process of the user";
  EXPECT_TRUE(mine.running());
  EXPECT_TRUE(other.running());
}

// What cannot be known is null in JSON, not "": a lost GPU's name and uuid, a vanished PID's command.
TEST_F(PsKill, UnknownsAreNullInJson) {
  const std::string scenario = "gpu\ngpu lost=1\n";
  const auto ps = nlohmann::json::parse(run_gpumem({"ps", "--json"}, env(scenario)).out);
  ASSERT_EQ(ps["gpus"].size(), 2u) << ps;
  EXPECT_TRUE(ps["gpus"][1]["name"].is_null()) << ps;
  EXPECT_TRUE(ps["gpus"][1]["uuid"].is_null()) << ps;
  const auto killed = nlohmann::json::parse(run_gpumem({"kill", "--json", std::to_string(dead_pid())}, env(scenario)).out);
  ASSERT_EQ(killed.size(), 1u) << killed;
  EXPECT_TRUE(killed[0]["command"].is_null()) << killed;
}

// A driver daemon's name is anyone's to take: a user's job renamed nvidia-smi is no daemon, and
// `kill --gpu` chooses it.
TEST_F(PsKill, ADaemonsNameAloneMakesNoDaemon) {
  if (geteuid() != 0 || std::system("command -v setpriv >/dev/null") != 0) GTEST_SKIP() << "needs root and setpriv";
  const std::filesystem::path bin = dev_ / "bin";
  std::filesystem::create_directories(bin);
  std::filesystem::create_symlink("/bin/sleep", bin / "nvidia-smi");
  std::filesystem::permissions(dev_, std::filesystem::perms::all);
  std::filesystem::permissions(bin, std::filesystem::perms::all);
  Child job("exec setpriv --reuid=65534 --regid=65534 --clear-groups " + (bin / "nvidia-smi").string() + " 314");
  for (int i = 0; i < 500; ++i) {
    const auto p = gpumem::monitor::read_process(job.pid());
    if (p && p->comm == "nvidia-smi") break;
    usleep(2000);
  }
  const std::string scenario = "gpu\nproc gpu=0 pid=" + std::to_string(job.pid()) + " used_mib=1\n";
  const auto doc = nlohmann::json::parse(run_gpumem({"ps", "--json"}, env(scenario)).out);
  ASSERT_EQ(doc["processes"].size(), 1u) << doc;
  EXPECT_FALSE(doc["processes"][0]["driver_daemon"].get<bool>()) << doc;
  auto r = run_gpumem({"kill", "--gpu", "0", "--dry-run"}, env(scenario));
  EXPECT_NE(r.out.find("PID " + std::to_string(job.pid())), std::string::npos) << r.out << r.err;
}

// A PID that is gone leaves nothing done: "partly done" (exit 5) with the reason on stderr, not only in
// the table on stdout.
TEST_F(PsKill, APidThatIsGoneIsSaidOnStderr) {
  int gone = 0;
  {
    Child brief("exit 0");
    gone = brief.pid();
    brief.reap();
  }
  auto r = run_gpumem({"kill", std::to_string(gone), "--timeout", "1"}, env("gpu\n"));
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_NE(r.err.find("gpumem kill: 1 of 1 processes not stopped (PID " + std::to_string(gone) + ": no such process)"),
            std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  auto big = run_gpumem({"kill", std::to_string(gone), "--timeout", "1e308"}, env("gpu\n"));
  EXPECT_EQ(big.status, 2);
  EXPECT_NE(big.err.find("--timeout needs seconds from 0 to 999999"), std::string::npos) << big.err;
}

// Processes that report more than the GPU's used memory: said so in words, the signed difference in JSON.
TEST_F(PsKill, ProcessesAboveUsedMemoryAreSaidNotNegative) {
  Child a("exec sleep 321");
  wait_for_exec(a, "321");
  const std::string scenario = "gpu used_mib=1000\nproc gpu=0 pid=" + std::to_string(a.pid()) + " used_mib=1200\n";
  auto r = run_gpumem({"ps"}, env(scenario));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("by processes 1200 MiB, processes report 200 MiB more than used"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("unexplained -"), std::string::npos) << r.out;
  auto j = run_gpumem({"ps", "--json"}, env(scenario));
  ASSERT_EQ(j.status, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["gpus"][0]["unexplained_bytes"].get<long long>(), -(200ll << 20));
}

// Used memory unknown: the part no process explains is unknown too, not "0 MiB".
TEST_F(PsKill, UnknownUsedMemoryLeavesUnexplainedUnknown) {
  const std::string scenario = "gpu total_mib=na used_mib=na\n";
  auto r = run_gpumem({"ps"}, env(scenario));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("used -, by processes 0 MiB, unexplained -"), std::string::npos) << r.out;
  auto j = run_gpumem({"ps", "--json"}, env(scenario));
  EXPECT_TRUE(nlohmann::json::parse(j.out)["gpus"][0]["unexplained_bytes"].is_null()) << j.out;
}
