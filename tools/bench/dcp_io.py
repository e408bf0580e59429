"""The PyTorch DCP peer for tools/bench/gpu_bench.sh: torch.distributed.checkpoint save and
load of the same state meshtrain checkpoints (every key and global shape from meshtrain's
state_dict_keys.json: model parameters and AdamW's exp_avg / exp_avg_sq, float32), held on
the GPU as meshtrain holds it, to a folder on the same disk. One process, DCP's defaults
(FileSystemWriter with sync_files, so every file is fsynced as meshtrain's are). The files leave
the page cache before the load (page_cache.py), so the load reads the disk as meshtrain's does.

    python3 tools/bench/dcp_io.py STATE_DICT_KEYS.json FOLDER
"""
import json, os, shutil, sys, time

import torch
import torch.distributed.checkpoint as dcp

from page_cache import evict  # tools/bench/, beside this file


def main():
    keys_path, folder = sys.argv[1], sys.argv[2]
    keys = json.load(open(keys_path))["keys"]
    state = {k: torch.randn(v["shape"], device="cuda") for k, v in keys.items() if v["kind"] == "tensor"}
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    shutil.rmtree(folder, ignore_errors=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    dcp.save(state, checkpoint_id=folder)
    save_s = time.perf_counter() - t0
    before = {k: v.sum().item() for k, v in list(state.items())[:3]}
    for t in state.values():
        t.zero_()
    evict(folder)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    dcp.load(state, checkpoint_id=folder)
    torch.cuda.synchronize()
    load_s = time.perf_counter() - t0
    assert all(abs(state[k].sum().item() - v) <= 1e-3 * max(1.0, abs(v)) for k, v in before.items()), "DCP load mismatch"
    on_disk = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(json.dumps({"impl": "dcp", "state_bytes": nbytes, "bytes_on_disk": on_disk,
                      "save_s": save_s, "load_s": load_s}))
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
