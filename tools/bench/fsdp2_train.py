"""The PyTorch FSDP2 peer for tools/bench/fsdp_speed.sh (issue 17): transformers'
LlamaForCausalLM with meshtrain's 1B configuration (hf_train.py's), fully_shard on every
decoder layer and then the root, bf16 compute and fp32 gradient reduction
(MixedPrecisionPolicy), reshard after forward (FSDP2's default), fused AdamW, clip at 1.0,
fp32 cross-entropy, byte-range tokens. --mode compile adds torch.compile per decoder layer,
as torchtitan does. Rank 0 prints one JSON line: global tokens/s over the steps after
warm-up, the worst rank's peak allocated bytes, first and last loss, the AdamW
implementation and the CPU threads torch used.

--cpu-offload is the peer of meshtrain --fsdp.cpu-offload (tools/bench/offload_bench.sh):
every fully_shard call gets offload_policy=CPUOffloadPolicy() (pinned host memory), so the
sharded fp32 parameters, their gradients and AdamW's state live on the host and AdamW steps
there. torchrun sets OMP_NUM_THREADS=1; with --cpu-offload the run uses the host's cores
(torch.set_num_threads(cores // world)) so the host optimizer is not held to one thread.
--optimizer-impl picks AdamW's fused (the default, as torchtitan), foreach or for-loop kernel;
should fused AdamW refuse the offloaded (CPU DTensor) parameters, the run falls back to
foreach and the JSON's "optimizer_impl" says which ran. --init-device cuda builds the
unsharded model on the GPU (faster than the CPU) before fully_shard shards / offloads it.
With either, the peak-memory statistics are reset once the model is sharded, so the
unsharded states' transient trip through the GPU is not counted: the peak is the steps'.

    torchrun --standalone --nproc-per-node N tools/bench/fsdp2_train.py --mode eager|compile --batch 2
    torchrun --standalone --nproc-per-node 1 tools/bench/fsdp2_train.py --cpu-offload --batch 2 --steps 8 --warmup 3
"""
import argparse, json, os, statistics, sys, time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard  # torch >= 2.6
from transformers import LlamaForCausalLM

from hf_train import llama_1b_config  # the one-GPU peer's model (this script's folder is on sys.path)


def host_cores():
    try:
        return len(os.sched_getaffinity(0))  # what nproc counts
    except AttributeError:
        return os.cpu_count() or 1


def build(mode, mesh, world, cpu_offload=False, init_device="cpu"):
    # The same fp32 weights on every rank (one seed), built on the CPU as hf_train.py does;
    # fully_shard moves each rank's shards to its GPU, so no GPU ever holds the whole model.
    # (--init-device cuda: built on this rank's GPU instead, then sharded.)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # torchrun sets 1: init is faster with more
    torch.manual_seed(0)
    if init_device == "cuda":
        with torch.device("cuda", torch.cuda.current_device()):
            model = LlamaForCausalLM(llama_1b_config())
    else:
        model = LlamaForCausalLM(llama_1b_config())
    torch.set_num_threads(threads)
    model.train()
    layers = model.model.layers
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    extra = {"offload_policy": CPUOffloadPolicy(pin_memory=True)} if cpu_offload else {}
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
        fully_shard(layer, mesh=mesh, mp_policy=mp, **extra)
    fully_shard(model, mesh=mesh, mp_policy=mp, **extra)  # embedding, final norm, output projection
    return model


def make_adamw(params, impl):
    kw = {"fused": dict(fused=True), "foreach": dict(foreach=True), "forloop": dict(foreach=False)}[impl]
    return torch.optim.AdamW(params, lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=2, help="sequences per rank")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--trace", help="rank 0 writes a Chrome trace of one extra, untimed step here")
    ap.add_argument("--cpu-offload", action="store_true", help="FSDP2's CPUOffloadPolicy on every fully_shard")
    ap.add_argument("--optimizer-impl", choices=["fused", "foreach", "forloop"], default="fused",
                    help="AdamW kernel (fused falls back to foreach if it refuses the parameters)")
    ap.add_argument("--init-device", choices=["cpu", "cuda"], default="cpu", help="where the unsharded model is built")
    ap.add_argument("--model", choices=["1B"], default="1B", help="meshtrain's flavor (only 1B)")
    a = ap.parse_args()

    local = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cuda", (world,))
    model = build(a.mode, mesh, world, a.cpu_offload, a.init_device)
    if a.init_device == "cuda" or a.cpu_offload:
        # fully_shard moves each module's states to the GPU before sharding (and offloading)
        # them; that transient copy is gone now: the peak counts the training steps from here.
        import gc
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    if a.cpu_offload:
        torch.set_num_threads(max(1, host_cores() // world))  # AdamW and the copies run on the host
    n_params = sum(p.numel() for p in model.parameters())  # DTensors count their global size
    params = list(model.parameters())
    opt_impl = [a.optimizer_impl]
    try:
        opt = [make_adamw(params, a.optimizer_impl)]
    except (RuntimeError, ValueError, TypeError) as e:
        if a.optimizer_impl != "fused" or not a.cpu_offload:
            raise
        print(f"fsdp2_train: fused AdamW refused the parameters ({e}); using foreach", file=sys.stderr)
        opt_impl[0] = "foreach"
        opt = [make_adamw(params, "foreach")]
    gen = torch.Generator(device="cpu").manual_seed(1 + rank)  # each rank its own data, as in data parallelism

    def opt_step():
        if opt_impl[0] != "fused" or not a.cpu_offload:
            opt[0].step()
            return
        try:
            opt[0].step()
        except (RuntimeError, NotImplementedError, TypeError) as e:
            # Fused AdamW on CPU DTensors may be missing a kernel or a sharding rule. The first
            # step fails before any update, so a fresh foreach AdamW takes it over losing nothing.
            print(f"fsdp2_train: fused AdamW failed on the offloaded parameters ({e}); using foreach", file=sys.stderr)
            opt_impl[0] = "foreach"
            opt[0] = make_adamw(params, "foreach")
            opt[0].step()

    def step():
        tokens = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen).to(dev, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        # No autocast: FSDP2 casts the gathered weights to bf16. No KV cache in training.
        logits = model(input_ids=inputs, use_cache=False).logits  # [b, T, V] bf16
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # DTensor grads: the norm is global
        opt_step()
        opt[0].zero_grad(set_to_none=True)
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
        impl = "fsdp2-" + a.mode + ("-offload" if a.cpu_offload else "")
        print(json.dumps({"impl": impl, "params": n_params, "world": world, "batch": a.batch,
                          "seq": a.seq, "tokens_per_s": tps, "tokens_per_s_per_gpu": tps / world,
                          "steps_timed": len(steady), "step_times_s": t.tolist(),
                          "peak_allocated_bytes": int(peak.item()), "first_loss": losses[0],
                          "last_loss": losses[-1], "torch": torch.__version__, "cpu_offload": a.cpu_offload,
                          "optimizer_impl": opt_impl[0], "cpu_threads": torch.get_num_threads(),
                          "init_device": a.init_device}), flush=True)

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
