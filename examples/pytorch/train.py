"""A small torchtitan-like trainer: the user code that examples/pytorch.yaml runs under meshtest.

Llama-style decoder with torchtitan's module names, byte-level data from trainer/data/corpus.txt,
--parallel none|ddp|fsdp (FSDP2 fully_shard) on gloo/CPU (or --device cuda --backend nccl), torchtitan's console line and
TensorBoard tags, and a torch.distributed.checkpoint (DCP) folder step-<N>/ with torchtitan's flat
keys. Launched like torchrun: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ... in the environment.
Runs on PyTorch 1.13 (none, ddp) and 2.x (all modes); features are detected, never versions.
"""
import argparse, faulthandler, logging, math, os, re, resource, signal, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record
from torch.nn.utils import parametrize


def import_dcp_113():
    """torch 1.13's DCP is torch.distributed._shard.checkpoint. Under Python >= 3.11 (Debian 12) its
    import fails: a dataclass field defaults to an unhashable TensorProperties(). Import it with that
    default turned into a default_factory, which is what later torch does."""
    import dataclasses
    get_field = dataclasses._get_field

    def patched(cls, name, *rest):
        f = cls.__dict__.get(name)
        if isinstance(f, dataclasses.Field) and type(f.default).__name__ == "TensorProperties":
            f.default_factory, f.default = type(f.default), dataclasses.MISSING
        return get_field(cls, name, *rest)
    dataclasses._get_field = patched
    try:
        import torch.distributed._shard.checkpoint as m
    finally:
        dataclasses._get_field = get_field
    return m


try:
    import torch.distributed.checkpoint as dcp          # torch >= 2.0
except ImportError:
    dcp = import_dcp_113()
try:
    from torch.distributed.fsdp import fully_shard      # torch >= 2.6
except ImportError:
    try:
        from torch.distributed._composable.fsdp import fully_shard  # torch 2.4, 2.5
    except ImportError:
        fully_shard = None                              # torch 1.13: no FSDP2
try:
    from torch.distributed.tensor import DTensor
except ImportError:
    try:
        from torch.distributed._tensor import DTensor
    except ImportError:
        DTensor = None

p = argparse.ArgumentParser(prog="train.py", description=__doc__.splitlines()[0])
p.add_argument("--parallel", choices=["none", "ddp", "fsdp"], default="none")
p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
p.add_argument("--backend", default="gloo", help="torch.distributed's backend (nccl with --device cuda)")
p.add_argument("--key-style", choices=["canonical", "parametrize"], default="canonical",
               help="parametrize: SimpleFSDP before torchtitan #1273 (keys <module>.parametrizations.weight.original)")
p.add_argument("--steps", type=int, default=10)
p.add_argument("--stop-at", type=int, default=0, help="stop after this step (after saving)")
p.add_argument("--seed", type=int, default=42)
p.add_argument("--seq-len", type=int, default=64)
p.add_argument("--batch-size", type=int, default=8, help="global batch, in sequences")
p.add_argument("--lr", type=float, default=8e-4)
p.add_argument("--warmup-steps", type=int, default=2)
p.add_argument("--max-norm", type=float, default=1.0)
p.add_argument("--dim", type=int, default=64)
p.add_argument("--n-layers", type=int, default=2)
p.add_argument("--n-heads", type=int, default=8)
p.add_argument("--n-kv-heads", type=int, default=4)
HERE = os.path.dirname(os.path.abspath(__file__))
# a checkout, or <prefix>/share/meshtest, which mirrors it
SHIPPED_CORPUS = os.path.join(HERE, "..", "..", "trainer", "data", "corpus.txt")
p.add_argument("--data", default=SHIPPED_CORPUS,
               help="default: the repository's trainer/data/corpus.txt, found from this file (any working directory), "
                    "or an installed meshtest's share/meshtest/trainer/data/corpus.txt")
p.add_argument("--job.dump_folder", "--dump_folder", dest="dump_folder", default="./outputs")
p.add_argument("--log.legacy", dest="log_legacy", action="store_true", help="the 7.4f era: no grad_norm")
p.add_argument("--metrics.log_freq", dest="log_freq", type=int, default=1)
p.add_argument("--metrics.enable_tensorboard", dest="tensorboard", action="store_true")
p.add_argument("--checkpoint.enable", dest="ckpt", action="store_true")
p.add_argument("--checkpoint.folder", dest="ckpt_folder", default="", help="default <dump_folder>/checkpoint")
p.add_argument("--checkpoint.interval", dest="ckpt_interval", type=int, default=500)
VOCAB = 258  # bytes 0..255, BOS 256, EOS 257 (unused here)


# ----------------------------------------------------------------------------- model
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):  # x: [B, T, H, hd], rotate adjacent pairs (torchtitan's complex layout)
    x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        q = rope(self.wq(x).view(B, T, self.n_heads, self.head_dim), cos, sin)
        k = rope(self.wk(x).view(B, T, self.n_kv_heads, self.head_dim), cos, sin)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)
        rep = self.n_heads // self.n_kv_heads  # grouped-query attention: share each kv head
        q, k, v = (t.transpose(1, 2) for t in (q, k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf")).softmax(-1)
        return self.wo((att @ v).transpose(1, 2).reshape(B, T, -1))


class FeedForward(nn.Module):  # SwiGLU
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1, self.w2, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(hidden, dim, bias=False), nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, hidden):
        super().__init__()
        self.attention, self.attention_norm = Attention(dim, n_heads, n_kv_heads), RMSNorm(dim)
        self.feed_forward, self.ffn_norm = FeedForward(dim, hidden), RMSNorm(dim)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, a):
        super().__init__()
        hidden = 32 * math.ceil(int(2 * 4 * a.dim / 3) / 32)  # Llama's rule, multiple_of 32: 192 for dim 64
        self.tok_embeddings = nn.Embedding(VOCAB, a.dim)
        self.layers = nn.ModuleList(TransformerBlock(a.dim, a.n_heads, a.n_kv_heads, hidden) for _ in range(a.n_layers))
        self.norm, self.output = RMSNorm(a.dim), nn.Linear(a.dim, VOCAB, bias=False)
        hd = a.dim // a.n_heads
        freqs = torch.outer(torch.arange(a.seq_len).float(), 1.0 / (500000.0 ** (torch.arange(0, hd, 2).float() / hd)))
        self.register_buffer("cos", freqs.cos()[None, :, None, :], persistent=False)
        self.register_buffer("sin", freqs.sin()[None, :, None, :], persistent=False)
        nn.init.normal_(self.tok_embeddings.weight)  # torchtitan's init, drawn in module order
        for i, layer in enumerate(self.layers):
            for w in (layer.attention.wq, layer.attention.wk, layer.attention.wv, layer.feed_forward.w1):
                nn.init.trunc_normal_(w.weight, std=0.02)
            for w in (layer.attention.wo, layer.feed_forward.w2, layer.feed_forward.w3):
                nn.init.trunc_normal_(w.weight, std=0.02 / math.sqrt(2 * (i + 1)))
        s = a.dim ** -0.5
        nn.init.trunc_normal_(self.output.weight, std=s, a=-3 * s, b=3 * s)

    def forward(self, tokens):
        T = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos[:, :T], self.sin[:, :T])
        return self.output(self.norm(h))


class Identity(nn.Module):  # a trivial parametrization: only the state-dict keys change
    def forward(self, w):
        return w


# ----------------------------------------------------------------------------- helpers
def clip_grad_norm(params, max_norm):
    """Global L2 norm before clipping, then clip. Sharded (DTensor) grads: each rank sums its shard."""
    sq, sharded = torch.zeros((), dtype=torch.float64, device=params[0].device), False
    for q in params:
        g = q.grad
        if DTensor is not None and isinstance(g, DTensor):
            g, sharded = g.to_local(), True
        sq += g.double().pow(2).sum()
    if sharded:
        dist.all_reduce(sq)
    norm = sq.sqrt().item()
    coef = max_norm / (norm + 1e-6)
    if coef < 1:
        for q in params:
            q.grad.mul_(coef)
    return norm


def newest_step(folder):
    steps = [int(m.group(1)) for d in (os.listdir(folder) if os.path.isdir(folder) else [])
             if (m := re.fullmatch(r"step-(\d+)", d)) and os.path.isfile(os.path.join(folder, d, ".metadata"))]
    return max(steps, default=0)


def dcp_save(state, path):  # dcp.save: torch >= 2.2; save_state_dict: 1.13 - 2.1
    if hasattr(dcp, "save"):
        return dcp.save(state, checkpoint_id=path)
    dcp.save_state_dict(state, storage_writer=dcp.FileSystemWriter(path, single_file_per_rank=True))


def dcp_load(state, path):
    if hasattr(dcp, "load"):
        return dcp.load(state, checkpoint_id=path)
    dcp.load_state_dict(state, storage_reader=dcp.FileSystemReader(path))


def die(message, code):
    print(f"train.py: error: {message}", file=sys.stderr)
    sys.exit(code)


def flat_state(model, opt, sched, step):
    """torchtitan's flattened checkpoint dict: model keys unprefixed, optimizer.state.<fqn>.<k>, ..."""
    state = dict(model.state_dict())
    fqn = {q: n for n, q in model.named_parameters()}
    for q, st in opt.state.items():
        for k, v in st.items():
            state[f"optimizer.state.{fqn[q]}.{k}"] = v
    state["lr_scheduler.last_epoch"] = sched.last_epoch
    state["train_state.step"] = step
    return state


# ----------------------------------------------------------------------------- main
@record
def main():
    args = p.parse_args()
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.parallel == "fsdp" and fully_shard is None:
        die(f"--parallel fsdp needs FSDP2 (torch >= 2.4); this is torch {torch.__version__}", 3)
    if args.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:
            die(f"--metrics.enable_tensorboard needs the tensorboard package ({e})", 3)
    if args.parallel == "none" and world != 1:
        die(f"--parallel none runs on 1 rank, not {world}", 2)
    logging.basicConfig(format="[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s",
                        level=logging.INFO, stream=sys.stdout, force=True)
    log = logging.getLogger()
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    # A hung rank is stopped by meshtest with SIGTERM: print every thread's stack into the rank log
    # first, so the timeout's `log:` line shows where it waited (docs/triage.md).
    faulthandler.register(signal.SIGTERM, chain=True)
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    if "RANK" in os.environ:
        dist.init_process_group(args.backend)

    # model: the full model, identical on every rank, before any sharding
    torch.manual_seed(args.seed)
    model = Transformer(args)
    if args.key_style == "parametrize":
        for m in [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Embedding, RMSNorm))]:
            parametrize.register_parametrization(m, "weight", Identity())
    model.to(device)  # drawn on the CPU from the seed: the same weights on every device
    inner = model  # the module whose state_dict and parameter names we checkpoint
    if args.parallel == "ddp":
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    elif args.parallel == "fsdp":
        try:
            from torch.distributed.device_mesh import init_device_mesh
        except ImportError:
            from torch.distributed._tensor import init_device_mesh
        mesh = init_device_mesh(device.type, (world,))
        for layer in inner.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(inner, mesh=mesh)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    w, decay = args.warmup_steps, max(1, args.steps - args.warmup_steps)
    schedule = lambda s: (s + 1) / (w + 1) if s < w else 1 - (s - w) / decay  # torchtitan's warmup, linear decay
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)

    # checkpoint: resume from the newest complete step-<N>
    folder = args.ckpt_folder or os.path.join(args.dump_folder, "checkpoint")
    start = newest_step(folder) if args.ckpt else 0
    if start:
        for q in params:  # create the optimizer state so that DCP can load into it in place
            opt.state[q] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(q), "exp_avg_sq": torch.zeros_like(q)}
        state = flat_state(inner, opt, sched, 0)
        dcp_load(state, os.path.join(folder, f"step-{start}"))  # differing keys: DCP raises here
        inner.load_state_dict({k: state[k] for k in inner.state_dict()})
        start, sched.last_epoch = int(state["train_state.step"]), int(state["lr_scheduler.last_epoch"])
        for g in opt.param_groups:
            g["lr"] = args.lr * schedule(sched.last_epoch)
        log.info(f"resumed from {folder}/step-{start} (step {start}, lr {opt.param_groups[0]['lr']:.3g})")

    # data: the global batch of step s depends only on (seed, s); data-parallel rank r takes its slice
    data = torch.tensor(list(open(args.data, "rb").read()), dtype=torch.long)
    dp, dp_rank = (1, 0) if args.parallel == "none" else (world, rank)
    assert args.batch_size % dp == 0, f"--batch-size {args.batch_size} does not divide by {dp} ranks"
    local = args.batch_size // dp

    def batch(step):
        g = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
        starts = torch.randint(0, len(data) - args.seq_len - 1, (args.batch_size,), generator=g)
        starts = starts[dp_rank * local:(dp_rank + 1) * local]
        x = torch.stack([data[s:s + args.seq_len] for s in starts.tolist()])
        y = torch.stack([data[s + 1:s + args.seq_len + 1] for s in starts.tolist()])
        return x.to(device), y.to(device)

    n_params = sum(q.numel() for q in inner.parameters())  # global numel, also for DTensors
    flops_per_token = 6 * (n_params - VOCAB * args.dim) + 12 * args.n_layers * args.dim * args.seq_len
    total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    writer = None
    if args.tensorboard and rank == 0:
        writer = SummaryWriter(os.path.join(args.dump_folder, "tb", time.strftime("%Y%m%d-%H%M")))
    log.info(f"rank {rank}/{world}: --parallel {args.parallel}, {n_params:,} parameters, torch {torch.__version__}, "
             f"steps {start + 1}..{args.steps}")

    stop = min(args.steps, args.stop_at) if args.stop_at else args.steps
    for step in range(start + 1, stop + 1):
        t0 = time.perf_counter()
        x, y = batch(step)
        loss_sum = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
        (loss_sum / y.numel()).backward()  # DDP and FSDP average the gradients over the ranks
        grad_norm = clip_grad_norm(params, args.max_norm)
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        loss_sum = loss_sum.detach()
        if dist.is_initialized() and dp > 1:
            dist.all_reduce(loss_sum)
        loss = loss_sum.item() / (args.batch_size * args.seq_len)
        dt = time.perf_counter() - t0
        tps = local * args.seq_len / dt
        if rank == 0 and (step == 1 or step % args.log_freq == 0):
            gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30  # peak RSS on CPU
            pct, tflops = 100 * gib * 2**30 / total_ram, flops_per_token * tps / 1e12
            memory = f"\033[38;2;54;234;195mmemory: {gib:5.2f}GiB({pct:.2f}%)  "
            rest = f"\033[34mtps: {round(tps):,}  \033[36mtflops: {tflops:,.2f}  \033[35mmfu: N/A\033[39m"
            if args.log_legacy:
                log.info(f"\033[31mstep: {step:2}  \033[32mloss: {loss:7.4f}  " + memory + rest)
            else:
                log.info(f"\033[31mstep: {step:2}  \033[32mloss: {loss:8.5f}  "
                         f"\033[38;2;180;60;0mgrad_norm: {grad_norm:7.4f}  " + memory + rest)
        if writer:
            for tag, v in [("loss_metrics/global_avg_loss", loss), ("grad_norm", grad_norm), ("throughput(tps)", tps),
                           ("n_tokens_seen", step * args.batch_size * args.seq_len), ("lr", lr)]:
                writer.add_scalar(tag, v, step)
        if args.ckpt and (step % args.ckpt_interval == 0 or step == stop):
            path = os.path.join(folder, f"step-{step}")
            dcp_save(flat_state(inner, opt, sched, step), path)
            log.info(f"saved the checkpoint of step {step} to {path}")
    if writer:
        writer.close()
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
