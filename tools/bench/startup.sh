#!/usr/bin/env bash
# Per-case start-up on GPUs: a zero-step meshtrain case (NCCL init, model build,
# teardown) launched by `meshtest launch`, against `torchrun` running a minimal Python
# script that does the same with PyTorch. Median of N launches each.
# Usage: tools/bench/startup.sh [NPROC] [N]   (after a CUDA build in build/cuda)
set -euo pipefail
cd "$(dirname "$0")/../.."
nproc_=${1:-2}
n=${2:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/peer.py" <<'PY'
# The torchrun peer: what a zero-step torchtitan case does before training.
import os, torch, torch.distributed as dist
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
x = torch.ones(1, device="cuda")
dist.all_reduce(x)
layer = torch.nn.TransformerDecoderLayer(256, 16, 704, batch_first=True, device="cuda")  # ~debugmodel block
model = torch.nn.ModuleList([layer for _ in range(6)])
torch.cuda.synchronize()
dist.destroy_process_group()
PY
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_it() {  # seconds of one launch, measured from a process already running
  python3 -c 'import subprocess, sys, time
t = time.monotonic(); r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
print(time.monotonic() - t if r.returncode == 0 else "nan")' "$@"
}
mt=(); tr=()
for _ in $(seq "$n"); do
  mt+=("$(time_it build/cuda/meshtest launch --nproc "$nproc_" -- build/cuda/meshtrain train --model debugmodel \
          --steps 0 --backend nccl --dump-folder "$tmp/mt" --quiet)")
  tr+=("$(time_it torchrun --standalone --nproc-per-node "$nproc_" "$tmp/peer.py")")
done
m=$(printf '%s\n' "${mt[@]}" | median)
t=$(printf '%s\n' "${tr[@]}" | median)
awk -v p="$nproc_" -v n="$n" -v m="$m" -v t="$t" 'BEGIN {
  printf "start-up, %s ranks, median of %s: meshtest+meshtrain %.2f s, torchrun+python %.2f s, ratio %.3f (target <= 0.25)\n", p, n, m, t, m / t }'
