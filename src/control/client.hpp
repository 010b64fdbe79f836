// Client of the control channel: what `gpumem stats/clear/reset/limit/stop/snapshot`, `top` and the
// exporter use to reach running gpumem processes. Stable interface; see protocol.hpp for the messages.
//
// Contract:
//  - list_processes() finds the live gpumem processes whose sockets we can see: our own user's, and as
//    root every user's. Stale sockets (process gone) are removed when we own them, never reported.
//  - Every call on a pid connects, sends one request and waits at most `timeout`: by default 2 s, and
//    10 s for the calls that give memory back first (clear, limit, stop, release), which take ~40 us
//    per physical page (a second for tens of GiB in 2 MiB pages).
//  - Failures throw ControlError whose kind tells why, with one sentence in what():
//      not_gpumem   the process exists but has no gpumem control socket (not gpumem, or GPUMEM_CONTROL=0)
//      other_user   the process (or its socket) belongs to another user
//      no_answer    it did not answer within the timeout
//      gone         no such process
//      refused      the process answered with an error (bad request, invalid limit, ...)
//  - No call throws anything else except std::bad_alloc (and, from snapshot(), what its sink throws).
#pragma once
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/protocol.hpp"

namespace gpumem::control {

inline constexpr std::chrono::milliseconds kDefaultTimeout{2000};
inline constexpr std::chrono::milliseconds kReleaseTimeout{10000};

enum class FailureKind { not_gpumem, other_user, no_answer, gone, refused };

class ControlError : public std::runtime_error {
 public:
  ControlError(FailureKind kind, int pid, const std::string& sentence)
      : std::runtime_error(sentence), kind_(kind), pid_(pid) {}
  FailureKind kind() const noexcept { return kind_; }
  int pid() const noexcept { return pid_; }

 private:
  FailureKind kind_;
  int pid_;
};

struct ProcessRef {
  int pid = 0;
  uid_t uid = 0;
  std::string socket;
};

struct DeviceReport {
  int device = 0;
  std::string backend;
  std::string device_key;
  std::int64_t allocated_bytes = 0, allocated_peak_bytes = 0;
  std::int64_t reserved_bytes = 0, reserved_peak_bytes = 0;
  std::int64_t requested_bytes = 0, requested_peak_bytes = 0;
  std::int64_t largest_free_bytes = 0;
  std::int64_t num_ooms = 0, num_alloc_retries = 0;
  std::int64_t limit_bytes = 0;  // 0: none
};

struct ProcessReport {
  int pid = 0;
  std::vector<DeviceReport> devices;
};

struct SnapshotSummary {
  SnapshotFormat format = SnapshotFormat::pickle;
  std::uint64_t bytes = 0;  // of the document
  std::int64_t devices = 0, segments = 0, blocks = 0, active_blocks = 0;  // as report::count_snapshot counts
};

struct LimitAnswer {
  std::int64_t limit_bytes = 0;
  std::int64_t reserved_bytes = 0;
  std::int64_t released_bytes = 0;
  bool fits = true;
  bool pending = false;  // the program has not used the device yet: the limit applies from its first allocation
  double fraction = 0;   // pending and given as a fraction of the device's memory
};

std::vector<ProcessRef> list_processes(bool every_user = false);

ProcessReport stats(int pid, std::chrono::milliseconds timeout = kDefaultTimeout);
std::int64_t clear(int pid, std::chrono::milliseconds timeout = kReleaseTimeout);  // bytes given back
void reset_peaks(int pid, std::chrono::milliseconds timeout = kDefaultTimeout);
LimitAnswer limit_bytes(int pid, int device, std::uint64_t bytes, std::chrono::milliseconds timeout = kReleaseTimeout);
LimitAnswer limit_fraction(int pid, int device, double fraction,
                           std::chrono::milliseconds timeout = kReleaseTimeout);
std::int64_t stop(int pid, std::chrono::milliseconds timeout = kReleaseTimeout);  // cache bytes released
std::int64_t release(int pid, const std::string& device_key, std::chrono::milliseconds timeout = kReleaseTimeout);

// The process's memory snapshot (PyTorch's _snapshot() pickle, or gpumem's JSON), handed to `sink` chunk by
// chunk as it arrives, so it is never whole in memory here either; `device`: that device only. `timeout`
// bounds each wait (the first answer, every chunk, the trailer). A document that ends early throws
// ControlError (gone / no_answer / refused); what the sink throws ends the transfer and reaches the caller.
SnapshotSummary snapshot(int pid, SnapshotFormat format, std::optional<int> device,
                         const std::function<void(std::string_view)>& sink,
                         std::chrono::milliseconds timeout = kDefaultTimeout);

// Cooperative release: asks every other gpumem process we may control to give back the free cache it holds
// on `device_key`; processes that fail or do not answer within `per_process` are skipped. Returns the bytes
// released in all. Never throws.
std::int64_t ask_others_to_release(const std::string& device_key, std::chrono::milliseconds per_process) noexcept;

// One request as JSON in, the answer's JSON out ("ok": true checked); the building block of the above.
nlohmann::json call(int pid, const nlohmann::json& request, std::chrono::milliseconds timeout = kDefaultTimeout);

}  // namespace gpumem::control
