// gpumem stats / clear / reset / limit / stop: control a running gpumem process from outside through its
// control socket (src/control/client.hpp).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "cli/exit_codes.hpp"
#include "control/channel.hpp"
#include "control/client.hpp"
#include "gpumem/errors.hpp"
#include "gpumem/limits.hpp"
#include "gpumem/trace.hpp"
#include "monitor/kill.hpp"

namespace gpumem::cli {
namespace {

constexpr const char* kControlExitHelp =
    "Exit codes:\n"
    "  0  success\n"
    "  1  the process could not be controlled: gone, no gpumem in it, another user's, no answer in time\n"
    "     (2 s; 10 s for clear, limit and stop), or it refused the request (one sentence on stderr says which)\n"
    "  2  bad usage (unknown flag, bad PID, device, size or fraction)\n"
    "  5  partly done (--all: some processes failed; stop: it had to be killed; limit: set, but the memory\n"
    "     in use is already over it)\n";

struct ControlArgs {
  std::string command;  // stats, clear, ...: names its error sentences
  int pid = 0;
  bool all = false, json = false;
  std::string amount;  // limit: SIZE or FRACTION
  int device = 0;
  double timeout = 10.0;
};

// Error sentences come from another process: replace invalid UTF-8 rather than throw.
void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n", j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

std::vector<int> targets(const ControlArgs& a) {
  if (a.all == (a.pid > 0)) throw CLI::ValidationError("give one PID or --all");
  if (!a.all) return {a.pid};
  std::vector<int> pids;
  for (const auto& p : control::list_processes(true))
    if (p.pid != getpid()) pids.push_back(p.pid);
  return pids;
}

// A command that failed on a process: its sentence, or with --json the same entry stats and clear give an
// unreachable process (scripts read stdout either way).
int fail(const ControlArgs& a, const control::ControlError& e) {
  if (a.json) print_json(nlohmann::ordered_json{{"pid", a.pid}, {"error", e.what()}});
  else std::fprintf(stderr, "gpumem %s: %s.\n", a.command.c_str(), e.what());
  return kExitFailure;
}

nlohmann::ordered_json device_json(const control::DeviceReport& d) {
  return {{"device", d.device},
          {"backend", d.backend},
          {"allocated_bytes", d.allocated_bytes},
          {"allocated_peak_bytes", d.allocated_peak_bytes},
          {"reserved_bytes", d.reserved_bytes},
          {"reserved_peak_bytes", d.reserved_peak_bytes},
          {"requested_bytes", d.requested_bytes},
          {"requested_peak_bytes", d.requested_peak_bytes},
          {"largest_free_bytes", d.largest_free_bytes},
          {"num_ooms", d.num_ooms},
          {"num_alloc_retries", d.num_alloc_retries},
          {"limit_bytes", d.limit_bytes}};
}

std::string b(std::int64_t bytes) { return format_bytes(std::size_t(std::max<std::int64_t>(bytes, 0))); }

// Runs `one` on every target process and gathers what it returns; a process that cannot be reached becomes
// an error entry (--json) or one sentence, and the exit code says whether all, some or none answered.
int for_each_target(const ControlArgs& a, const std::function<nlohmann::ordered_json(int pid)>& one) {
  std::vector<int> pids = targets(a);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  int failures = 0;
  for (int pid : pids) {
    try {
      out.push_back(one(pid));
    } catch (const control::ControlError& e) {
      ++failures;
      if (a.json) out.push_back({{"pid", pid}, {"error", e.what()}});
      else fail(a, e);
    }
  }
  if (a.json) print_json(out);
  else if (pids.empty())  // --all with nobody to ask: say so rather than print nothing
    std::fprintf(stderr, "gpumem %s: no gpumem process of %s is running (none has a control socket).\n",
                 a.command.c_str(), geteuid() == 0 ? "any user" : "this user");
  if (failures == 0) return kExitOk;
  return a.all && failures < int(pids.size()) ? kExitPartial : kExitFailure;
}

int run_stats(const ControlArgs& a) {
  bool header = a.json;  // printed over the first answer: a failure alone prints only its sentence
  return for_each_target(a, [&](int pid) {
    control::ProcessReport r = control::stats(pid);
    if (!header)
      std::printf("%-8s %-4s %-6s %12s %12s %12s %12s %12s %12s %5s %12s\n", "PID", "DEV", "BACKEND", "ALLOCATED",
                  "PEAK", "RESERVED", "PEAK", "REQUESTED", "LARGEST", "OOMS", "LIMIT");
    header = true;
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& d : r.devices) {
      devices.push_back(device_json(d));
      if (!a.json)
        std::printf("%-8d %-4d %-6s %12s %12s %12s %12s %12s %12s %5lld %12s\n", pid, d.device, d.backend.c_str(),
                    b(d.allocated_bytes).c_str(), b(d.allocated_peak_bytes).c_str(), b(d.reserved_bytes).c_str(),
                    b(d.reserved_peak_bytes).c_str(), b(d.requested_bytes).c_str(), b(d.largest_free_bytes).c_str(),
                    (long long)d.num_ooms, d.limit_bytes ? b(d.limit_bytes).c_str() : "none");
    }
    return nlohmann::ordered_json{{"pid", pid}, {"devices", devices}};
  });
}

int run_clear(const ControlArgs& a) {
  return for_each_target(a, [&](int pid) {
    std::int64_t released = control::clear(pid);
    if (!a.json) std::printf("%d: %s given back to the device\n", pid, b(released).c_str());
    return nlohmann::ordered_json{{"pid", pid}, {"released_bytes", released}};
  });
}

int run_reset(const ControlArgs& a) {
  try {
    control::reset_peaks(a.pid);
  } catch (const control::ControlError& e) {
    return fail(a, e);
  }
  if (a.json) print_json({{"pid", a.pid}, {"reset", true}});
  else std::printf("%d: peak statistics reset\n", a.pid);
  return kExitOk;
}

int run_limit(const ControlArgs& a) {
  control::LimitAnswer answer;
  LimitAmount amount;
  try {
    amount = parse_limit_amount(a.amount);
  } catch (const std::invalid_argument& e) {
    throw CLI::ValidationError(std::string(e.what()) + " (a SIZE such as 12GiB, 0 for none, or a FRACTION such as 0.5)");
  }
  try {
    answer = amount.fraction ? control::limit_fraction(a.pid, a.device, amount.share)
                             : control::limit_bytes(a.pid, a.device, amount.bytes);
  } catch (const control::ControlError& e) {
    return fail(a, e);
  }
  if (a.json) {
    nlohmann::ordered_json j = {{"pid", a.pid}, {"device", a.device}, {"limit_bytes", answer.limit_bytes},
                        {"reserved_bytes", answer.reserved_bytes}, {"released_bytes", answer.released_bytes},
                        {"fits", answer.fits}, {"pending", answer.pending}};
    if (answer.pending && answer.fraction > 0) j["limit_fraction"] = answer.fraction;
    print_json(j);
  } else if (answer.pending) {
    const std::string limit = answer.fraction > 0 ? fmt::format("{:g} of its memory", answer.fraction)
                              : answer.limit_bytes ? b(answer.limit_bytes) : "none";
    std::printf("%d: device %d limit %s from the program's first allocation there (it has not used the device yet)\n",
                a.pid, a.device, limit.c_str());
  } else {
    std::printf("%d: device %d limit %s; reserved %s", a.pid, a.device,
                answer.limit_bytes ? b(answer.limit_bytes).c_str() : "none", b(answer.reserved_bytes).c_str());
    if (answer.released_bytes) std::printf(" after releasing %s of cache", b(answer.released_bytes).c_str());
    std::printf(answer.fits ? " (fits)\n" : " (does NOT fit: memory in use is over the limit)\n");
  }
  return answer.fits ? kExitOk : kExitPartial;
}

int run_stop(const ControlArgs& a) {
  if (!(a.timeout >= 0 && a.timeout < 1e6)) throw CLI::ValidationError("--timeout needs seconds from 0 to 999999");
  auto start = std::chrono::steady_clock::now();
  // The process asked to stop is the only one signalled after the timeout, should its PID be reused.
  const auto asked = monitor::read_process(a.pid);
  std::int64_t released = 0;
  try {
    released = control::stop(a.pid);
  } catch (const control::ControlError& e) {
    return fail(a, e);
  }
  auto deadline = start + std::chrono::duration<double>(a.timeout);
  while (control::process_alive(a.pid) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::string outcome = "stopped";
  int code = kExitOk;
  if (control::process_alive(a.pid)) {
    monitor::KillOptions opt;
    opt.timeout_s = 5.0;
    std::optional<unsigned long long> start_time;
    if (asked) start_time = asked->start_time;
    auto outcomes = monitor::kill_processes({monitor::KillTarget{a.pid, start_time}}, opt);
    outcome = monitor::kill_all_done(outcomes) ? "killed after the timeout" : "still running after SIGKILL";
    code = kExitPartial;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (a.json)
    print_json({{"pid", a.pid}, {"released_bytes", released}, {"outcome", outcome}, {"seconds", seconds}});
  else
    std::printf("%d: %s in %.2f s (%s of cache released first)\n", a.pid, outcome.c_str(), seconds, b(released).c_str());
  return code;
}

// One registration per verb; PID parsing and flags are shared.

CommandRunner setup(CLI::App& sub, int (*run)(const ControlArgs&), bool allow_all,
                    void (*extra)(CLI::App&, ControlArgs&) = nullptr) {
  auto a = std::make_shared<ControlArgs>();
  a->command = sub.get_name();
  sub.footer(kControlExitHelp);
  auto* pid = sub.add_option("pid", a->pid, "process id of a program running on gpumem")->check(pid_validator());
  if (allow_all) sub.add_flag("--all", a->all, "every gpumem process of this user (root: of everyone)");
  else pid->required();
  if (extra) extra(sub, *a);
  sub.add_flag("--json", a->json, "print JSON");
  return [a, run, &sub] {
    try {
      return run(*a);
    } catch (const CLI::ValidationError& e) {
      std::fprintf(stderr, "gpumem %s: %s.\n", sub.get_name().c_str(), e.what());
      return int(kExitUsage);
    }
  };
}

}  // namespace

GPUMEM_REGISTER_COMMAND(stats, "stats", "allocator statistics of a running gpumem process (or --all)", 60,
                        [](CLI::App& sub) { return setup(sub, run_stats, true); });
GPUMEM_REGISTER_COMMAND(clear, "clear", "empty_cache() in a running gpumem process: its free cache goes back", 61,
                        [](CLI::App& sub) { return setup(sub, run_clear, true); });
GPUMEM_REGISTER_COMMAND(reset, "reset", "reset the peak statistics of a running gpumem process", 62,
                        [](CLI::App& sub) { return setup(sub, run_reset, false); });
GPUMEM_REGISTER_COMMAND(limit, "limit", "change a running gpumem process's memory limit (SIZE or FRACTION)", 63,
                        [](CLI::App& sub) {
                          return setup(sub, run_limit, false, [](CLI::App& s, ControlArgs& a) {
                            s.add_option("amount", a.amount, "bytes (12GiB, 512MiB; 0 or none removes the limit) or a "
                                                              "fraction of the device (0.5)")->required();
                            s.add_option("--device", a.device, "device index in that process (default 0)")
                                ->check(device_index_validator());
                          });
                        });
GPUMEM_REGISTER_COMMAND(stop, "stop", "stop a running gpumem process gracefully (KeyboardInterrupt / on_stop)", 64,
                        [](CLI::App& sub) {
                          return setup(sub, run_stop, false, [](CLI::App& s, ControlArgs& a) {
                            s.add_option("--timeout", a.timeout, "seconds to wait before escalating like "
                                                                 "`gpumem kill` (default 10)");
                          });
                        });

}  // namespace gpumem::cli
