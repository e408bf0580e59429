"""The peer for tools/bench/fsdp_bench.sh: a plain NCCL all-gather and reduce-scatter loop
(torch.distributed, bf16 and fp32 buffers from 1 MiB to 1 GiB of output), timed with CUDA
events, as nccl-tests measures: algbw = output bytes (all-gather) or input bytes
(reduce-scatter) / time, busbw = algbw * (n - 1) / n. Rank 0 prints one JSON line.

    torchrun --standalone --nproc-per-node N tools/bench/nccl_peer.py
"""
import json, os

import torch
import torch.distributed as dist


def main():
    local = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    results = []
    for dtype in (torch.bfloat16, torch.float32):
        for mib in (1, 4, 16, 64, 256, 1024):
            total = mib * 2**20 // torch.tensor([], dtype=dtype).element_size()
            total -= total % n
            full = torch.empty(total, dtype=dtype, device="cuda")
            piece = torch.empty(total // n, dtype=dtype, device="cuda")
            for op in ("all_gather", "reduce_scatter"):
                run = (lambda: dist.all_gather_into_tensor(full, piece)) if op == "all_gather" else \
                      (lambda: dist.reduce_scatter_tensor(piece, full))
                for _ in range(5):
                    run()
                iters = 20
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                s.record()
                for _ in range(iters):
                    run()
                e.record()
                torch.cuda.synchronize()
                sec = s.elapsed_time(e) / 1e3 / iters
                algbw = full.numel() * full.element_size() / sec
                results.append({"op": op, "dtype": str(dtype).replace("torch.", ""), "bytes": full.numel() * full.element_size(),
                                "time_s": sec, "busbw": algbw * (n - 1) / n})
    if dist.get_rank() == 0:
        peak = {op: max(r["busbw"] for r in results if r["op"] == op) for op in ("all_gather", "reduce_scatter")}
        print(json.dumps({"world_size": n, "peak_busbw": peak, "results": results}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
