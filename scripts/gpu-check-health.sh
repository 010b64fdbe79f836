#!/usr/bin/env bash
# Proof of gpumem's health fields on a real GPU (run through the device tool; not part of `make test`):
#  1. `gpumem query` retired_pages.* print what `nvidia-smi --query-gpu` prints for the same fields.
#  2. `gpumem dmon -s v` and `-s u` print nvidia-smi dmon's headers (pviol tviol; jpg ofa where that
#     nvidia-smi prints them) and, on an idle GPU, the same violation values (pviol within 5 points).
#  3. `gpumem top`'s %SM for a busy PyTorch process against `nvidia-smi pmon -s u` (needs tmux and torch;
#     skipped otherwise), within 20 points.
#  4. `gpumem exporter --once`: DCGM_FI_DEV_XID_ERRORS on every GPU that supports XID events, 0 without an XID;
#     DCGM_FI_DEV_{CORRECTABLE,UNCORRECTABLE}_REMAPPED_ROWS equal to `nvidia-smi --query-remapped-rows`.
# Prints PASS/FAIL/SKIP lines; exit 1 when any check fails.
# Usage: scripts/gpu-check-health.sh [path/to/gpumem]   (default: build/gpumem)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-find-gpumem.sh
find_gpumem gpu-check-health "${1:-}"
command -v nvidia-smi >/dev/null || { echo "gpu-check-health: nvidia-smi not found"; exit 1; }
FAILS=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; FAILS=$((FAILS+1)); }
skip() { echo "SKIP $*"; }
squash() { sed -E 's/[[:space:]]+/ /g; s/ $//'; }

# 1. Retired pages: counters that only move on ECC failures, so both tools print the same now.
F=index,retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending
smi=$(nvidia-smi --query-gpu=$F --format=csv 2>&1)
ours=$("$BIN" query --query-gpu=$F --format=csv 2>&1)
if [[ "$smi" == "$ours" ]]; then pass "query retired_pages.*: $(echo "$ours" | sed -n 2p)"
else fail "query retired_pages.*"; diff <(echo "$smi") <(echo "$ours"); fi
smi=$(nvidia-smi --query-gpu=retired_pages.sbe,retired_pages.dbe --format=csv,noheader 2>&1)
ours=$("$BIN" query --query-gpu=retired_pages.sbe,retired_pages.dbe --format=csv,noheader 2>&1)
[[ "$smi" == "$ours" ]] && pass "query retired_pages aliases" || fail "query retired_pages aliases: nvidia-smi '$smi' gpumem '$ours'"

# 2. dmon headers per letter, and the violation values of an idle GPU.
for s in v u uv; do
  smi=$(nvidia-smi dmon -c 1 -s $s 2>&1 | head -2 | squash)
  ours=$("$BIN" dmon -c 1 -s $s 2>&1 | head -2 | squash)
  [[ "$smi" == "$ours" ]] && pass "dmon -s $s header: $(echo "$ours" | head -1)" || fail "dmon -s $s header: nvidia-smi '$smi' / gpumem '$ours'"
done
smi=$(nvidia-smi dmon -c 1 -s v 2>&1 | grep -v '^#' | squash)
ours=$("$BIN" dmon -c 1 -s v 2>&1 | grep -v '^#' | squash)
echo "  nvidia-smi dmon -s v: $smi"
echo "  gpumem dmon -s v:     $ours"
if paste <(echo "$smi") <(echo "$ours") | awk '{ if ($1 != $4 || ($2 == "-") != ($5 == "-") || $2 - $5 > 5 || $5 - $2 > 5 || $3 != $6) bad = 1 } END { exit bad }'; then
  pass "dmon -s v values (pviol within 5 points, tviol equal)"
else fail "dmon -s v values"; fi

# 3. %SM of a busy process: gpumem top (in tmux) vs nvidia-smi pmon.
if command -v tmux >/dev/null && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda"); end = time.time() + 40
while time.time() < end: a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()' &
  BUSY=$!
  sleep 8
  tmux kill-session -t gpumem-health 2>/dev/null
  tmux new-session -d -s gpumem-health -x 220 -y 50 "TERM=xterm-256color $BIN top --readonly -d 1"
  sleep 6
  screen=$(tmux capture-pane -p -t gpumem-health)
  tmux kill-session -t gpumem-health
  pm=$(nvidia-smi pmon -c 1 -s u | awk -v p=$BUSY '$2 == p { print $4 }')
  col=$(echo "$screen" | awk '/ PID / { for (i = 1; i <= NF; i++) if ($i == "%SM") c = i } c && $2 == "'$BUSY'" { print $c; exit }')
  echo "  busy pid $BUSY: nvidia-smi pmon sm=$pm, gpumem top %SM=$col"
  kill $BUSY 2>/dev/null; wait $BUSY 2>/dev/null
  if [[ "$pm" =~ ^[0-9]+$ && "$col" =~ ^[0-9]+$ ]] && (( col - pm <= 20 && pm - col <= 20 )); then pass "top %SM matches pmon"
  else fail "top %SM vs pmon"; echo "$screen" | head -30; fi
else skip "top %SM (needs tmux and PyTorch with CUDA)"; fi

# 4. The exporter's last XID: present and 0 on a healthy GPU (an XID cannot be provoked safely here).
metrics=$("$BIN" exporter --once 2>&1)
n_gpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
n_xid=$(echo "$metrics" | grep -c '^DCGM_FI_DEV_XID_ERRORS{')
zeros=$(echo "$metrics" | grep '^DCGM_FI_DEV_XID_ERRORS{' | awk '$NF == 0' | wc -l)
echo "$metrics" | grep '^DCGM_FI_DEV_XID_ERRORS' | head -8
if (( n_xid == n_gpu && zeros == n_gpu )); then pass "exporter XID series on $n_xid/$n_gpu GPUs, value 0"
elif (( n_xid == n_gpu )); then fail "exporter XID nonzero on a GPU (check dmesg for NVRM: Xid; if one happened since boot this may be right)"
else fail "exporter XID series on $n_xid of $n_gpu GPUs"; fi

remap=$(nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable --format=csv,noheader 2>&1)
if [[ $? -ne 0 || "$remap" == *"Not Supported"* || -z "$remap" ]]; then
  skip "remapped rows (nvidia-smi: ${remap:-no output})"
  echo "$metrics" | grep -E '^DCGM_FI_DEV_(UN)?CORRECTABLE_REMAPPED_ROWS' | head -4
else
  ok=1
  while IFS=', ' read -r bus corr unc; do
    bus=$(echo "$bus" | tr -d ' ')
    ours_c=$(echo "$metrics" | grep "^DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{" | grep -i "pci_bus_id=\"$bus\"" | awk '{print $NF}')
    ours_u=$(echo "$metrics" | grep "^DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{" | grep -i "pci_bus_id=\"$bus\"" | awk '{print $NF}')
    echo "  $bus: nvidia-smi correctable=$corr uncorrectable=$unc; exporter $ours_c / $ours_u"
    [[ "$corr" == "$ours_c" && "$unc" == "$ours_u" ]] || ok=0
  done <<< "$remap"
  (( ok )) && pass "exporter remapped rows equal nvidia-smi --query-remapped-rows" || fail "exporter remapped rows"
fi

echo "gpu-check-health: $FAILS failure(s)"
(( FAILS == 0 ))
