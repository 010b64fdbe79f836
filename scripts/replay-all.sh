#!/usr/bin/env bash
# Replays every trace (../shared/traces and data/) with --min-capacity and prints, one line per trace,
# peak reserved / peak live, the smallest capacity that replays / peak live, and the driver calls.
# Usage: scripts/replay-all.sh [GPUMEM_BINARY] [extra replay flags...]   (default build/gpumem)
# Judge an engine change by the worst line, never the mean (issue 7).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/gpumem}
shift || true
[ -x "$bin" ] || { echo "replay-all: no gpumem binary at $bin (make first, or pass its path)" >&2; exit 2; }
traces=(../shared/traces/*.jsonl.gz data/*.jsonl.gz)
printf '%-30s %8s %12s %8s\n' trace ratio min-capacity calls
for t in "${traces[@]}"; do
  [ -e "$t" ] || continue
  "$bin" replay --json --min-capacity "$@" "$t" 2>/dev/null | python3 -c '
import json, sys
j = json.load(sys.stdin)
print("%-30s %8.4f %12.4f %8d" % (j["trace"].split("/")[-1], j["ratio"], j["min_capacity_ratio"], j["driver_calls"]))'
done
