// Timed: adds the wall time of its scope to a counter (BackendCallCounts' *_ns), so memory_stats() can say
// what each kind of driver call costs on the running workload.
#pragma once
#include <chrono>
#include <cstdint>

#include "gpumem/backend.hpp"

namespace gpumem {

class Timed {
 public:
  explicit Timed(std::uint64_t& into) noexcept : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~Timed() {
    BackendCallCounts::add_shared(  // synchronize() may time itself on several threads at once
        into_, std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start_).count()));
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  std::uint64_t& into_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gpumem
