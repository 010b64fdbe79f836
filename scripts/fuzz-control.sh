#!/usr/bin/env bash
# libFuzzer over the control channel's request handling (issue 9 asks for >= 5 minutes clean).
# Usage: scripts/fuzz-control.sh [SECONDS]   (default 300). Needs clang with libFuzzer (Debian: clang).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
out=${FUZZ_DIR:-build-fuzz}
mkdir -p "$out/corpus"
cp -n tests/control/fuzz_corpus/* "$out/corpus/" 2>/dev/null || true
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude -Isrc \
  tests/control/fuzz_request.cpp src/control/protocol.cpp src/control/server.cpp src/control/server_snapshot.cpp \
  src/control/channel.cpp src/report/pickle_writer.cpp src/report/torch_snapshot.cpp src/report/snapshot_json.cpp \
  src/engine/*.cpp src/backends/host_backend.cpp src/backends/stream_tickets.cpp -o "$out/fuzz_control_request"
"$out/fuzz_control_request" -max_total_time="$seconds" -max_len=70000 -print_final_stats=1 "$out/corpus"
