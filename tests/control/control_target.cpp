// A program on gpumem's C ABI that tests control from outside. It reads commands on stdin, one per line,
// and answers one line on stdout each:
//   alloc BYTES   -> "ok" | "oom"        (keeps the block)
//   allocn N BYTES -> "ok" | "oom"       (N blocks of BYTES each, kept)
//   allocon D BYTES -> "ok" | "oom"      (on device D; kept until exit)
//   addr          -> the most recent block's address, in decimal
//   history N     -> "ok" after gpumem_history_start(N entries, no stacks): snapshots carry a trace
//   framed BYTES  -> "ok" | "oom"        (alloc with the frame train.py:42 step, for the history)
//   free          -> "ok"                (frees the most recent block)
//   stats         -> {"allocated":..,"reserved":..,"peak_allocated":..,"peak_reserved":..}
//   fork          -> "ok" after a child that called exit() was reaped (it must not take our socket along)
//   quit          -> exits 0
// It prints "ready PID" first, after its first allocation started the control server.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gpumem/gpumem.h"
#include "gpumem/gpumem_history.h"

namespace {
const char* outcome(int rc) { return rc == GPUMEM_OK ? "ok" : rc == GPUMEM_E_OOM ? "oom" : "error"; }
}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  void* first = nullptr;
  if (gpumem_allocate(512, 0, nullptr, &first) != GPUMEM_OK) {
    std::printf("error %s\n", gpumem_last_error());
    return 1;
  }
  gpumem_deallocate(first, 0, nullptr);
  std::printf("ready %d\n", int(getpid()));
  std::vector<void*> blocks;
  auto keep = [&](unsigned long long bytes) {
    void* p = nullptr;
    int rc = gpumem_allocate(bytes, 0, nullptr, &p);
    if (rc == GPUMEM_OK) blocks.push_back(p);
    return rc;
  };
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    if (std::strncmp(line, "alloc ", 6) == 0) {
      std::printf("%s\n", outcome(keep(std::strtoull(line + 6, nullptr, 10))));
    } else if (std::strncmp(line, "allocn ", 7) == 0) {
      char* rest = nullptr;
      unsigned long long n = std::strtoull(line + 7, &rest, 10), bytes = std::strtoull(rest, nullptr, 10);
      int rc = GPUMEM_OK;
      for (unsigned long long i = 0; i < n && rc == GPUMEM_OK; ++i) rc = keep(bytes);
      std::printf("%s\n", outcome(rc));
    } else if (std::strncmp(line, "allocon ", 8) == 0) {
      char* rest = nullptr;
      const int device = int(std::strtol(line + 8, &rest, 10));
      void* p = nullptr;
      std::printf("%s\n", outcome(gpumem_allocate(std::strtoull(rest, nullptr, 10), device, nullptr, &p)));
    } else if (std::strncmp(line, "addr", 4) == 0) {
      std::printf("%llu\n", blocks.empty() ? 0ULL : (unsigned long long)(std::uintptr_t)blocks.back());
    } else if (std::strncmp(line, "history ", 8) == 0) {
      std::printf("%s\n", outcome(gpumem_history_start(std::strtoull(line + 8, nullptr, 10), 1, 0, nullptr)));
    } else if (std::strncmp(line, "framed ", 7) == 0) {
      gpumem_history_set_frames("train.py\x1f" "42\x1fstep");
      std::printf("%s\n", outcome(keep(std::strtoull(line + 7, nullptr, 10))));
    } else if (std::strncmp(line, "free", 4) == 0) {
      if (!blocks.empty()) {
        gpumem_deallocate(blocks.back(), 0, nullptr);
        blocks.pop_back();
      }
      std::printf("ok\n");
    } else if (std::strncmp(line, "stats", 5) == 0) {
      std::printf("{\"allocated\":%zu,\"reserved\":%zu,\"peak_allocated\":%zu,\"peak_reserved\":%zu}\n",
                  gpumem_memory_allocated(0), gpumem_memory_reserved(0), gpumem_max_memory_allocated(0),
                  gpumem_max_memory_reserved(0));
    } else if (std::strncmp(line, "fork", 4) == 0) {
      std::fflush(stdout);
      pid_t child = fork();
      if (child == 0) std::exit(0);
      waitpid(child, nullptr, 0);
      std::printf("ok\n");
    } else if (std::strncmp(line, "quit", 4) == 0) {
      return 0;
    } else {
      std::printf("unknown\n");
    }
  }
  return 0;
}
