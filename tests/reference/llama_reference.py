#!/usr/bin/python3
"""Independent reference for meshtrain's single-rank training (tiny flavors).

Written from docs/meshtrain.md ("Model", "Data", "Training step", the flag
table), not from meshtrain's sources. It starts from a meshtrain step-0
checkpoint, takes the data order (window indices per step) from meshtrain's
own metrics.jsonl ("sample_windows"), trains with plain PyTorch in float32 and
writes OUT/metrics.jsonl: {"step", "loss", "grad_norm", "lr"} per step.

    python3 tests/reference/llama_reference.py --checkpoint CASE/checkpoint/step-0 \
        --windows CASE/metrics.jsonl --out OUT [--model tiny] [--steps 10] ...
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

BOS, EOS = 256, 257
NORM_EPS = 1e-5
ROPE_THETA = 500000.0

# Flavor dimensions (trainer/model/flavors.cpp); ffn_hidden is the documented result, asserted below.
FLAVORS = {
    "tiny": dict(dim=64, n_layers=2, n_heads=8, n_kv_heads=4, vocab=258,
                 multiple_of=32, ffn_dim_multiplier=None, ffn_hidden=192),
    "tiny_uneven": dict(dim=40, n_layers=5, n_heads=4, n_kv_heads=2, vocab=259,
                        multiple_of=1, ffn_dim_multiplier=1.3, ffn_hidden=137),
}


def fail(msg):
    sys.exit("llama_reference: error: " + msg)


def ffn_hidden_dim(f):
    hidden = int(2 * 4 * f["dim"] / 3)
    if f["ffn_dim_multiplier"] is not None:
        hidden = int(f["ffn_dim_multiplier"] * hidden)
    m = f["multiple_of"]
    return m * ((hidden + m - 1) // m)


def param_shapes(f):
    dim, hd = f["dim"], f["dim"] // f["n_heads"]
    kv, ffn, vocab = f["n_kv_heads"] * hd, ffn_hidden_dim(f), f["vocab"]
    shapes = {"tok_embeddings.weight": [vocab, dim]}
    for i in range(f["n_layers"]):
        p = "layers.%d." % i
        shapes[p + "attention.wq.weight"] = [dim, dim]
        shapes[p + "attention.wk.weight"] = [kv, dim]
        shapes[p + "attention.wv.weight"] = [kv, dim]
        shapes[p + "attention.wo.weight"] = [dim, dim]
        shapes[p + "attention_norm.weight"] = [dim]
        shapes[p + "feed_forward.w1.weight"] = [ffn, dim]
        shapes[p + "feed_forward.w2.weight"] = [dim, ffn]
        shapes[p + "feed_forward.w3.weight"] = [ffn, dim]
        shapes[p + "ffn_norm.weight"] = [dim]
    shapes["norm.weight"] = [dim]
    shapes["output.weight"] = [vocab, dim]
    return shapes


# ---------------------------------------------------------------- checkpoint

def load_checkpoint(folder, shapes):
    """Reads the model.* tensors of a meshtrain step folder into float32 tensors."""
    meta_path = os.path.join(folder, ".metadata")
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
    except (OSError, ValueError) as e:
        fail("cannot read checkpoint metadata %s: %s" % (meta_path, e))
    keys = meta.get("keys")
    if not isinstance(keys, dict):
        fail("%s has no \"keys\" object" % meta_path)
    if sys.byteorder != "little":
        fail("this reader assumes a little-endian host")
    files = {}
    params = {}
    for name, shape in shapes.items():
        key = "model." + name
        entry = keys.get(key)
        if entry is None:
            fail("%s: key %s is missing" % (meta_path, key))
        if entry.get("kind") != "tensor" or entry.get("dtype") != "float32":
            fail("%s: key %s is not a float32 tensor (%s, %s)"
                 % (meta_path, key, entry.get("kind"), entry.get("dtype")))
        if list(entry.get("shape", [])) != shape:
            fail("%s: key %s has shape %s, this --model needs %s"
                 % (meta_path, key, entry.get("shape"), shape))
        out = torch.empty(shape, dtype=torch.float32)
        covered = torch.zeros(shape, dtype=torch.int32)
        for c in entry.get("chunks", []):
            fname = os.path.join(folder, c["file"])
            if fname not in files:
                try:
                    with open(fname, "rb") as fh:
                        files[fname] = fh.read()
                except OSError as e:
                    fail("cannot read %s (key %s): %s" % (fname, key, e))
            data = files[fname]
            off, n = int(c["byte_offset"]), int(c["byte_length"])
            sizes, offsets = [int(s) for s in c["sizes"]], [int(o) for o in c["offsets"]]
            numel = 1
            for s in sizes:
                numel *= s
            if n != 4 * numel or off < 0 or off + n > len(data):
                fail("%s: chunk of key %s at bytes [%d, %d) does not hold %s float32 (file has %d bytes)"
                     % (fname, key, off, off + n, sizes, len(data)))
            if len(sizes) != len(shape) or any(o + s > d for o, s, d in zip(offsets, sizes, shape)):
                fail("%s: chunk of key %s at offsets %s sizes %s is outside shape %s"
                     % (fname, key, offsets, sizes, shape))
            piece = torch.frombuffer(bytearray(data[off:off + n]), dtype=torch.float32).reshape(sizes)
            idx = tuple(slice(o, o + s) for o, s in zip(offsets, sizes))
            out[idx] = piece
            covered[idx] += 1
        if not bool((covered == 1).all()):
            fail("%s: the chunks of key %s do not cover its shape %s exactly once" % (meta_path, key, shape))
        params[name] = out
    extra = sorted(k for k, e in keys.items()
                   if k.startswith("model.") and e.get("kind") == "tensor" and k[len("model."):] not in shapes)
    if extra:
        fail("%s: unexpected model keys for this flavor: %s" % (meta_path, ", ".join(extra[:5])))
    return params


# ---------------------------------------------------------------- data

def token_stream(corpus_path):
    """BOS + bytes + EOS per blank-line separated document, concatenated."""
    try:
        with open(corpus_path, "rb") as fh:
            raw = fh.read()
    except OSError as e:
        fail("cannot read corpus %s: %s" % (corpus_path, e))
    # A document is a run of non-empty lines; its lines are joined with "\n" (no trailing newline).
    docs, cur = [], []
    for line in raw.split(b"\n"):
        if line.strip(b"\r") == b"":
            if cur:
                docs.append(b"\n".join(cur))
                cur = []
        else:
            cur.append(line)
    if cur:
        docs.append(b"\n".join(cur))
    toks = []
    for d in docs:
        toks.append(BOS)
        toks.extend(d)
        toks.append(EOS)
    return torch.tensor(toks, dtype=torch.int64)


def read_windows(path, steps, global_batch):
    per_step = {}
    try:
        with open(path) as fh:
            for n, line in enumerate(fh, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except ValueError as e:
                    fail("%s line %d: not JSON: %s" % (path, n, e))
                if "step" in rec and "sample_windows" in rec:
                    per_step[int(rec["step"])] = [int(w) for w in rec["sample_windows"]]
    except OSError as e:
        fail("cannot read %s: %s" % (path, e))
    out = []
    for s in range(1, steps + 1):
        if s not in per_step:
            fail("%s has no \"sample_windows\" for step %d" % (path, s))
        if len(per_step[s]) != global_batch:
            fail("%s: step %d has %d sample_windows, the global batch is %d"
                 % (path, s, len(per_step[s]), global_batch))
        out.append(per_step[s])
    return out


def window_tokens(stream, w, seq_len):
    """Window w: tokens [w*seq_len, (w+1)*seq_len] (seq_len+1 tokens; consecutive windows share one)."""
    start = w * seq_len
    if w < 0 or start + seq_len + 1 > stream.numel():
        fail("window %d is outside the %d-token stream" % (w, stream.numel()))
    return stream[start:start + seq_len + 1]


# ---------------------------------------------------------------- model

def rms_norm(x, weight):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + NORM_EPS)).type_as(x) * weight


def rope_tables(seq_len, head_dim):
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (ROPE_THETA ** exponents)                       # [head_dim/2]
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # [T, head_dim/2]
    return torch.cos(angles), torch.sin(angles)


def apply_rope(x, cos, sin):
    # x: [B, T, H, D]; rotate the adjacent pairs (x[2i], x[2i+1]) by angle pos * inv_freq[i].
    b, t, h, d = x.shape
    pairs = x.float().reshape(b, t, h, d // 2, 2)
    re, im = pairs[..., 0], pairs[..., 1]
    c = cos.view(1, t, 1, d // 2)
    s = sin.view(1, t, 1, d // 2)
    out = torch.stack((re * c - im * s, re * s + im * c), dim=-1)
    return out.reshape(b, t, h, d).type_as(x)


def attention(x, p, prefix, f, cos, sin):
    b, t, _ = x.shape
    nh, nkv = f["n_heads"], f["n_kv_heads"]
    hd = f["dim"] // nh
    q = F.linear(x, p[prefix + "wq.weight"]).view(b, t, nh, hd)
    k = F.linear(x, p[prefix + "wk.weight"]).view(b, t, nkv, hd)
    v = F.linear(x, p[prefix + "wv.weight"]).view(b, t, nkv, hd)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    rep = nh // nkv
    k = torch.repeat_interleave(k, rep, dim=2)
    v = torch.repeat_interleave(v, rep, dim=2)
    q, k, v = (z.transpose(1, 2) for z in (q, k, v))              # [B, H, T, D]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).type_as(q)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, nh * hd)
    return F.linear(out, p[prefix + "wo.weight"])


def feed_forward(x, p, prefix):
    gate = F.silu(F.linear(x, p[prefix + "w1.weight"]))
    up = F.linear(x, p[prefix + "w3.weight"])
    return F.linear(gate * up, p[prefix + "w2.weight"])


def forward(p, f, tokens, cos, sin):
    h = F.embedding(tokens, p["tok_embeddings.weight"])
    for i in range(f["n_layers"]):
        pre = "layers.%d." % i
        h = h + attention(rms_norm(h, p[pre + "attention_norm.weight"]), p, pre + "attention.", f, cos, sin)
        h = h + feed_forward(rms_norm(h, p[pre + "ffn_norm.weight"]), p, pre + "feed_forward.")
    h = rms_norm(h, p["norm.weight"])
    return F.linear(h, p["output.weight"])


# ---------------------------------------------------------------- training

def lr_at(step, args):
    n, w = args.steps, args.warmup_steps
    if step <= w:
        return args.lr * step / (w + 1)
    return args.lr * (1.0 - (step - w - 1) / (n - w))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", required=True, help="meshtrain step folder with the initial weights (step-0)")
    ap.add_argument("--windows", required=True, help="meshtrain metrics.jsonl with sample_windows per step")
    ap.add_argument("--out", required=True, help="folder for metrics.jsonl")
    ap.add_argument("--corpus", default="trainer/data/corpus.txt")
    ap.add_argument("--model", default="tiny", choices=sorted(FLAVORS))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--local-batch-size", type=int, default=8)
    ap.add_argument("--global-batch-size", type=int, default=-1)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--lr", type=float, default=8e-4)
    ap.add_argument("--warmup-steps", type=int, default=2)
    ap.add_argument("--max-norm", type=float, default=1.0)
    # A matrix appends its case's options to every phase's command: accept meshtrain's
    # --seed (the weights come from the checkpoint) and --quiet.
    ap.add_argument("--seed", type=int, default=42, help="ignored: the initial weights come from --checkpoint")
    ap.add_argument("--quiet", action="store_true", help="print nothing on success")
    args = ap.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    f = FLAVORS[args.model]
    assert ffn_hidden_dim(f) == f["ffn_hidden"], (args.model, ffn_hidden_dim(f))
    if args.steps <= 0 or args.seq_len <= 0 or args.local_batch_size <= 0:
        fail("--steps, --seq-len and --local-batch-size must be positive")
    global_batch = args.local_batch_size if args.global_batch_size == -1 else args.global_batch_size
    if global_batch <= 0 or global_batch % args.local_batch_size != 0:
        fail("--global-batch-size %d is not a positive multiple of --local-batch-size %d"
             % (global_batch, args.local_batch_size))
    n_micro = global_batch // args.local_batch_size

    params = load_checkpoint(args.checkpoint, param_shapes(f))
    for t in params.values():
        t.requires_grad_(True)
    names = list(params)
    stream = token_stream(args.corpus)
    windows = read_windows(args.windows, args.steps, global_batch)
    cos, sin = rope_tables(args.seq_len, f["dim"] // f["n_heads"])

    opt = torch.optim.AdamW([params[n] for n in names], lr=args.lr, betas=(0.9, 0.95),
                            eps=1e-8, weight_decay=0.1)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for step in range(1, args.steps + 1):
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        batch = torch.stack([window_tokens(stream, w, args.seq_len) for w in windows[step - 1]])
        # Reported loss: the mean of the micro-batch means, accumulated in float32.
        loss_sum = torch.zeros((), dtype=torch.float32)
        for m in range(n_micro):
            mb = batch[m * args.local_batch_size:(m + 1) * args.local_batch_size]
            inputs, targets = mb[:, :-1], mb[:, 1:]
            logits = forward(params, f, inputs, cos, sin)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
            (loss / n_micro).backward()
            loss_sum += loss.detach()
        sq = 0.0
        for n in names:
            g = params[n].grad
            if g is not None:
                sq += float(torch.linalg.vector_norm(g, 2).double()) ** 2
        grad_norm = math.sqrt(sq)
        coef = args.max_norm / (grad_norm + 1e-6)
        if coef < 1.0:
            with torch.no_grad():
                for n in names:
                    if params[n].grad is not None:
                        params[n].grad.mul_(coef)
        opt.step()
        rows.append({"step": step, "loss": (loss_sum / n_micro).item(), "grad_norm": grad_norm, "lr": lr})

    with open(os.path.join(args.out, "metrics.jsonl"), "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    if args.quiet:
        return
    print("llama_reference: %s, %d steps, global batch %d (%d micro-batches of %d), seq_len %d: "
          "loss %.7g -> %.7g, grad_norm %.7g -> %.7g; wrote %s"
          % (args.model, args.steps, global_batch, n_micro, args.local_batch_size, args.seq_len,
             rows[0]["loss"], rows[-1]["loss"], rows[0]["grad_norm"], rows[-1]["grad_norm"],
             os.path.join(args.out, "metrics.jsonl")))


if __name__ == "__main__":
    main()
