#!/usr/bin/env bash
# Replays every trace (../shared/traces and data/) with --min-capacity and prints, one line per trace,
# peak reserved / peak live, the smallest capacity that replays / peak live, the size from which every
# probed larger one replays too / peak live (more when a larger device ran out of memory), and the
# driver calls and the time they would take on the program's thread on an H100 (`replay`'s per-page model,
# without pages made ahead).
# With MIN_LIMIT=1 also the smallest gpumem --limit that replays / peak live (a second search per trace,
# about as long again): the limit to run the program with, which can differ from the smallest device.
# Usage: [MIN_LIMIT=1] scripts/replay-all.sh [GPUMEM_BINARY] [extra replay flags...]   (default build/gpumem)
# Judge an engine change by the worst line, never the mean (issue 7).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/gpumem}
shift || true
[ -x "$bin" ] || { echo "replay-all: no gpumem binary at $bin (make first, or pass its path)" >&2; exit 2; }
traces=(../shared/traces/*.jsonl.gz data/*.jsonl.gz)
with_limit=${MIN_LIMIT:-0}
if [ "$with_limit" = 1 ]; then
  printf '%-30s %8s %12s %11s %10s %8s %8s\n' trace ratio min-capacity every-above min-limit calls drv-ms
else
  printf '%-30s %8s %12s %11s %8s %8s\n' trace ratio min-capacity every-above calls drv-ms
fi
for t in "${traces[@]}"; do
  [ -e "$t" ] || continue
  capacity=$("$bin" replay --json --min-capacity "$@" "$t" 2>/dev/null)
  limit='{}'
  [ "$with_limit" = 1 ] && limit=$("$bin" replay --json --min-limit "$@" "$t" 2>/dev/null)
  python3 -c '
import json, sys
j, l = json.loads(sys.argv[1]), json.loads(sys.argv[2])
name = j["trace"].split("/")[-1]
if l:
    print("%-30s %8.4f %12.4f %11.4f %10.4f %8d %8.1f" % (name, j["ratio"], j["min_capacity_ratio"],
          j["min_capacity_every_above_ratio"], l["min_limit_ratio"], j["driver_calls"], j["driver_ms_estimate"]))
else:
    print("%-30s %8.4f %12.4f %11.4f %8d %8.1f" % (name, j["ratio"], j["min_capacity_ratio"],
          j["min_capacity_every_above_ratio"], j["driver_calls"], j["driver_ms_estimate"]))' "$capacity" "$limit"
done
