#!/usr/bin/env bash
# On the GPU machine (PyTorch 2.11, tensorboard): the foreign-trainer reference run.
#  1. fixtures made by the real library: TensorBoard event files with what Python's reader returns
#     (tests/fixtures/tb-made/), and with DCP_FIXTURES=1 the DCP folders of tests/fixtures/dcp-made/
#     (bf16, uneven Shard(0) over 3 ranks, a 2x2 mesh, a protocol-2 .metadata);
#  2. examples/pytorch.yaml under meshtest: the PyTorch trainer on Gloo (CPU) and its meshtrain
#     comparison on one GPU (the CUDA build has no Gloo), merged into one report.
# Everything comes back as archives in $OUT: tb-made.tgz, pytorch-run.tgz (and dcp-made.tgz).
set -uo pipefail
cd "$(dirname "$0")/.."
source ci/gpu-env.sh
mkdir -p "${OUT:-build/cuda/results}" build/cuda/foreign
out=$(cd "${OUT:-build/cuda/results}" && pwd)
work=$(cd build/cuda/foreign && pwd)
rm -rf "${work:?}"/*
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'
python3 -c 'import tensorboard; print("tensorboard", tensorboard.__version__)' || true

if [ "${DCP_FIXTURES:-0}" = 1 ]; then  # tests/fixtures/dcp-made/ holds the last ones made
  python3 tools/fixtures/make_dcp_fixtures.py "$work/dcp-made" > "$work/dcp-made.log" 2>&1; echo "dcp fixtures exit $?"
  tail -n 5 "$work/dcp-made.log"; cp "$work/dcp-made.log" "$work/dcp-made/" 2>/dev/null
  tar czf "$out/dcp-made.tgz" -C "$work" dcp-made
fi
python3 tools/fixtures/make_tb_fixtures.py "$work/tb-made" > "$work/tb-made.log" 2>&1; echo "tb fixtures exit $?"
tail -n 5 "$work/tb-made.log"; cp "$work/tb-made.log" "$work/tb-made/" 2>/dev/null
tar czf "$out/tb-made.tgz" -C "$work" tb-made

gpu_build meshtest meshtrain
build/cuda/meshtest run examples/pytorch.yaml --backend gloo --ngpu 8 --exclude meshtrain \
  --out "$work/run-gloo" --grace 10 > "$work/run-gloo.log" 2>&1; echo "pytorch.yaml (gloo) exit $?"
build/cuda/meshtest run examples/pytorch.yaml --backend nccl --ngpu 1 -k meshtrain \
  --out "$work/run-nccl" --grace 10 > "$work/run-nccl.log" 2>&1; echo "pytorch.yaml (meshtrain on nccl) exit $?"
build/cuda/meshtest merge "$work/run" "$work/run-gloo" "$work/run-nccl" > "$work/merge.log" 2>&1; rc=$?
cat "$work/merge.log"
dest=$work/pytorch-run && mkdir -p "$dest"
cp "$work"/run-*.log "$work/merge.log" "$dest/"
for d in run run-gloo run-nccl; do
  [ -d "$work/$d" ] || continue
  mkdir -p "$dest/$d"
  (cd "$work/$d" && find . \( -name 'rank*.log' -o -name summary.json -o -name junit.xml -o -name 'TEST-*.xml' \
     -o -name metrics.jsonl -o -name '.metadata' -o -name 'events.out.tfevents.*' \) -exec cp --parents {} "$dest/$d/" \;)
done
tar czf "$out/pytorch-run.tgz" -C "$work" pytorch-run
echo "gpu-foreign: merged report exit $rc"
exit "$rc"
