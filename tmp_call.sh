#!/usr/bin/env bash
# temporary: one device call for issues 10/11/13/8 proofs
export LD_LIBRARY_PATH=$PWD/.device/gpu PYTHONDONTWRITEBYTECODE=1
BIN=.device/gpu/gpumem
echo "== exporter --once"; $BIN exporter --once 2>&1 | grep -E "XID|REMAPPED|error|rror" | head -5
echo "== health"; timeout 90 bash scripts/gpu-check-health.sh $BIN 2>&1 | grep -E "PASS|FAIL|exporter"
echo "== package"; timeout 240 bash bench/gpu/package_check.sh build/dist/gpumem-0.1.0-py3-none-manylinux_2_34_x86_64.whl 2>&1 | tail -32
echo "== torch host cost"; timeout 150 python3 bench/gpu/torch_host_cost.py --gpumem $BIN 2>&1 | tail -12
echo "== top"
$BIN run -- python3 -c "
import torch, time
x = torch.empty(2 << 30, dtype=torch.uint8, device='cuda'); y = torch.empty(1 << 30, dtype=torch.uint8, device='cuda'); del y
z = torch.randn(4096, 4096, device='cuda')
print('ready', flush=True)
t = time.time()
while time.time() - t < 60: z = z @ z; z /= z.norm()
" > /tmp/run.log 2>&1 &
for _ in $(seq 1 600); do grep -q ready /tmp/run.log && break; sleep 0.1; done
tmux -L cap kill-server 2>/dev/null
tmux -L cap -f /dev/null new-session -d -x 120 -y 32 "echo \$\$ > /tmp/top.pid; exec $BIN top -d 1"
sleep 3; P=$(cat /tmp/top.pid); a=$(awk '{print $14+$15}' /proc/$P/stat); sleep 20; b=$(awk '{print $14+$15}' /proc/$P/stat)
tmux -L cap capture-pane -p; tmux -L cap send-keys q; sleep 1; tmux -L cap kill-server 2>/dev/null
echo "top CPU: $(awk "BEGIN{print ($b-$a)/$(getconf CLK_TCK)/20*100}") % of a core"
wait
