# shellcheck shell=bash
# Sourced on the (offline) GPU machine to run the real torchtitan, pytorch/torchtitan e51e914:
#   source ci/gpu-torchtitan-env.sh      # runs torchtitan_check unless TORCHTITAN_ENV_NOCHECK=1
#   then, per rank with RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT set (torchrun-style):
#   python3 -m torchtitan.train --module llama3 --config llama3_debugmodel $TORCHTITAN_ASSET_FLAGS ...
# torchtitan and the dependencies the GPU image lacks (tyro, typeguard, docstring_parser, shtab,
# torchdata, datasets, dill, multiprocess) are source copies in .deps/python (.deps/python/MANIFEST.txt);
# the test tokenizer and a small C4-style data set are in .deps/torchtitan-assets
# (tools/fixtures/make_c4_mini.py). Facts about the flags: .deps/torchtitan-facts.md.
# Nothing here uses the network; Hugging Face libraries are told to stay offline.

TORCHTITAN_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TORCHTITAN_ASSETS=$TORCHTITAN_REPO/.deps/torchtitan-assets
# Keep NVLink multicast off on shared hosts (as ci/gpu-env.sh does).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# Offline Hugging Face stack; `datasets` caches the Arrow copy of data.json under HF_HOME.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
export HF_HOME=${HF_HOME:-${TMPDIR:-/tmp}/meshtest-hf-home}
export PYTHONPATH=$TORCHTITAN_REPO/.deps/python${PYTHONPATH:+:$PYTHONPATH}
# typeguard 4.5 needs typing_extensions >= 4.14 (NoExtraItems); use the bundled 4.15 only if older.
if ! python3 -c 'import typing_extensions as t, sys; sys.exit(not hasattr(t, "NoExtraItems"))' 2>/dev/null; then
  export PYTHONPATH=$TORCHTITAN_REPO/.deps/python-fallback:$PYTHONPATH
fi
# torchtitan's defaults are relative to its checkout (./tests/assets/...): pass absolute paths.
export TORCHTITAN_ASSETS
export TORCHTITAN_ASSET_FLAGS="--hf_assets_path $TORCHTITAN_ASSETS/tests/assets/tokenizer --dataloader.dataset_path $TORCHTITAN_ASSETS/tests/assets/c4_test"

# torchtitan_check: imports torchtitan.train, prints versions, parses the debugmodel config,
# loads the tokenizer and the data set, takes one batch from torchtitan's dataloader (CPU only,
# no process group). Returns non-zero on failure.
torchtitan_check() {
  [ -f "$TORCHTITAN_ASSETS/tests/assets/c4_test/data.json" ] ||
    python3 "$TORCHTITAN_REPO/tools/fixtures/make_c4_mini.py" || return 1
  # shellcheck disable=SC2086  # the flags are word-split on purpose
  python3 - $TORCHTITAN_ASSET_FLAGS <<'EOF'
import importlib.metadata as md, sys
import torchtitan.train  # the whole import chain of the entry point
from torchtitan.config import ConfigManager
print("python", sys.version.split()[0], "| " + ", ".join(
    f"{p} {md.version(p)}" for p in ("torch", "torchtitan", "tyro", "typeguard", "docstring_parser", "torchdata",
    "datasets", "dill", "multiprocess", "huggingface_hub", "pyarrow", "fsspec", "tokenizers", "typing_extensions")))
import typing_extensions
print("torchtitan from", torchtitan.__path__[0], "| typing_extensions from", typing_extensions.__file__)
cfg = ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel", *sys.argv[1:]])
from torchtitan.components.tokenizer import HuggingFaceTokenizer
tok = HuggingFaceTokenizer(tokenizer_path=cfg.hf_assets_path)
from datasets import load_dataset
ds = load_dataset(cfg.dataloader.dataset_path, split="train")
ntok = sum(len(tok.encode(t, add_bos=True, add_eos=True)) for t in ds["text"])
t = cfg.training  # one batch through torchtitan's own dataloader (datasets + torchdata StatefulDataLoader)
dl = cfg.dataloader.build(dp_world_size=1, dp_rank=0, tokenizer=tok, seq_len=t.seq_len, local_batch_size=t.local_batch_size)
inputs, labels = next(iter(dl))
print(f"debugmodel: steps {t.steps}, batch {t.local_batch_size}, seq {t.seq_len}; tokenizer vocab {tok.get_vocab_size()} "
      f"bos {tok.bos_id} eos {tok.eos_id}; c4_test {len(ds)} records, {ntok:,} tokens = "
      f"{ntok / (t.local_batch_size * (t.seq_len + 1)):.1f} steps of one dp rank; first batch {tuple(inputs['input'].shape)}")
EOF
}

[ "${TORCHTITAN_ENV_NOCHECK:-0}" = 1 ] || torchtitan_check
