// Fuzz target: the trace reader. Text goes to parse_trace; input that starts like gzip goes through a
// file to read_trace (zlib's path). Anything but TraceError escaping, a crash, or a rewound reader that
// gives other events, is a bug.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <string_view>

#include "fuzz/fuzz_target.hpp"
#include "gpumem/trace.hpp"

GPUMEM_FUZZ_SEEDS({
    "{\"format\": \"gpumem-trace\", \"version\": 1}\n{\"t\": 1, \"op\": \"alloc\", \"addr\": 4096, \"size\": 512, "
    "\"stream\": 0}\n{\"t\": 2, \"op\": \"free\", \"addr\": 4096, \"size\": 512, \"stream\": 0}\n",
    "{\"format\": \"gpumem-trace\", \"version\": 1, \"source\": \"x\"}\n{\"t\": 1, \"op\": \"alloc\", \"addr\": 8192, "
    "\"size\": 1, \"stream\": 3}\n{\"t\": 5, \"op\": \"free\", \"addr\": 8192, \"size\": 1, \"stream\": 3}\n{\"t\": 9, "
    "\"op\": \"free_completed\", \"addr\": 8192, \"size\": 1, \"stream\": 3}\n{\"t\": 9, \"op\": \"segment_alloc\", "
    "\"addr\": 0, \"size\": 2097152, \"stream\": 0}\n",
})

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    gpumem::trace::parse_trace(text, "fuzz");
  } catch (const gpumem::trace::TraceError&) {
  }
  // A rewound reader gives the same events again (--min-capacity's streamed probes rely on it).
  try {
    gpumem::trace::TraceReader reader(text, "fuzz");
    gpumem::trace::Event e;
    std::size_t first = 0, second = 0;
    while (reader.next(e)) ++first;
    reader.rewind();
    while (reader.next(e)) ++second;
    if (first != second) std::abort();
  } catch (const gpumem::trace::TraceError&) {
  }
  if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
    char path[] = "/tmp/gpumem-fuzz-XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0) {
      if (write(fd, data, size) == ssize_t(size)) {
        try {
          gpumem::trace::read_trace(path);
        } catch (const gpumem::trace::TraceError&) {
        }
      }
      close(fd);
      unlink(path);
    }
  }
  return 0;
}
