#!/usr/bin/env bash
# Long fuzz runs with clang's libFuzzer (+ASan/UBSan), outside CI's time budget:
#   scripts/fuzz.sh [SECONDS per target, default 300] [targets...]
# Builds build-fuzz/ with clang++, writes each target's seeds as its starting corpus, runs each target
# for SECONDS and prints one PASS/FAIL line per target. Crash inputs land in build-fuzz/crashes/.
# Targets: fuzz_trace_reader fuzz_size fuzz_cli_options (the control channel's request parser joins here).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-300}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=(fuzz_trace_reader fuzz_size fuzz_cli_options)
JOBS=${JOBS:-2}
cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DGPUMEM_FUZZ=ON \
  -DGPUMEM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build-fuzz -j "$JOBS" --target "${TARGETS[@]}"
mkdir -p build-fuzz/crashes
status=0
for t in "${TARGETS[@]}"; do
  corpus=build-fuzz/corpus/$t
  mkdir -p "$corpus"
  log=build-fuzz/$t.log
  if GPUMEM_FUZZ_SEED_DIR="$corpus" ASAN_OPTIONS=detect_leaks=1 ./build-fuzz/tests/fuzz/$t "$corpus" -max_total_time="$SECONDS_PER_TARGET" \
      -max_len=65536 -rss_limit_mb=2048 -artifact_prefix=build-fuzz/crashes/$t- -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "PASS $t: ${SECONDS_PER_TARGET}s, $runs inputs, $cov"
  else
    echo "FAIL $t: see $log and build-fuzz/crashes/"
    status=1
  fi
done
exit $status
