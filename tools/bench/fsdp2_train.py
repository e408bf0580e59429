"""The PyTorch FSDP2 peer for tools/bench/fsdp_speed.sh (issue 17): transformers'
LlamaForCausalLM with meshtrain's 1B configuration (hf_train.py's), fully_shard on every
decoder layer and then the root, bf16 compute and fp32 gradient reduction
(MixedPrecisionPolicy), reshard after forward (FSDP2's default), fused AdamW, clip at 1.0,
fp32 cross-entropy, byte-range tokens. --mode compile adds torch.compile per decoder layer,
as torchtitan does. Rank 0 prints one JSON line: global tokens/s over the steps after
warm-up, the worst rank's peak allocated bytes, first and last loss.

    torchrun --standalone --nproc-per-node N tools/bench/fsdp2_train.py --mode eager|compile --batch 2
"""
import argparse, json, os, statistics, time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # torch >= 2.6
from transformers import LlamaForCausalLM

from hf_train import llama_1b_config  # the one-GPU peer's model (this script's folder is on sys.path)


def build(mode, mesh, world):
    # The same fp32 weights on every rank (one seed), built on the CPU as hf_train.py does;
    # fully_shard moves each rank's shards to its GPU, so no GPU ever holds the whole model.
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # torchrun sets 1: init is faster with more
    torch.manual_seed(0)
    model = LlamaForCausalLM(llama_1b_config())
    torch.set_num_threads(threads)
    model.train()
    layers = model.model.layers
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if mode == "compile":
        # The 16 blocks share one code object: let each keep its compiled graph should
        # dynamo guard on the block (8 by default; past it a block would silently run eager).
        from torch import _dynamo  # `import torch._dynamo` here would make `torch` local to build()
        cfg = _dynamo.config
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(cfg, name):
                setattr(cfg, name, max(getattr(cfg, name), 64))
    for i, layer in enumerate(layers):
        if mode == "compile":
            # Compile the block before sharding it, so FSDP2's hooks stay outside the graph
            # (torchtitan's order). Not fullgraph: transformers' layers may break the graph.
            layer = torch.compile(layer)
            layers[i] = layer
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)  # embedding, final norm, output projection
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--trace", help="rank 0 writes a Chrome trace of one extra, untimed step here")
    a = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,))
    model = build(a.mode, mesh, world)
    n_params = sum(p.numel() for p in model.parameters())  # DTensors count their global size
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(1 + rank)  # each rank its own data, as in data parallelism

    def step():
        tokens = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen).to(dev, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        # No autocast: FSDP2 casts the gathered weights to bf16. No KV cache in training.
        logits = model(input_ids=inputs, use_cache=False).logits  # [b, T, V] bf16
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # DTensor grads: the norm is global
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss = loss.detach()
        dist.all_reduce(loss, op=dist.ReduceOp.AVG)  # the global loss, as meshtrain logs it
        return loss.item()

    times, losses = [], []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        losses.append(step())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    # A step is as long as its slowest rank; peak memory is the worst rank's, since start-up
    # (as meshtrain's device_peak_bytes is).
    t = torch.tensor(times, dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    peak = torch.tensor([torch.cuda.max_memory_allocated(dev)], dtype=torch.int64, device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)

    if rank == 0:  # printed before the trace, so a profiler failure cannot lose it
        steady = t.tolist()[a.warmup:] or t.tolist()
        tps = world * a.batch * a.seq / statistics.median(steady)
        print(json.dumps({"impl": "fsdp2-" + a.mode, "params": n_params, "world": world, "batch": a.batch,
                          "seq": a.seq, "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
                          "steps_timed": len(steady), "step_times_s": t.tolist(),
                          "peak_allocated_bytes": int(peak.item()), "first_loss": losses[0],
                          "last_loss": losses[-1], "torch": torch.__version__}), flush=True)

    if a.trace:
        # Every rank runs the step (collectives need all of them); only rank 0 records it.
        from torch.profiler import ProfilerActivity, profile
        if rank == 0:
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            prof.export_chrome_trace(a.trace)
        else:
            step()
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
