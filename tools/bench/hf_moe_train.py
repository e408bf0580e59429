"""The transformers peer for tools/bench/moe_bench.sh: Qwen2MoeForCausalLM in the dimensions
of meshtrain's 1B_moe flavor, trained the way hf_train.py trains its Llama -- fp32 master
weights, bf16 compute (autocast), SDPA attention, fused AdamW (lr 8e-4, betas 0.9/0.95,
wd 0.1), clip at 1.0, fp32 cross-entropy -- on byte-range tokens. Prints one JSON line:
median tokens/s over the steps after warm-up, peak allocated bytes, the experts
implementation that ran, active and total parameters; with --trace a Chrome trace of one
extra, untimed step.

The model: 1B's attention (dim 2048, 16 layers, 32 heads, 8 kv heads, vocab 128256,
untied output); layer 0 a dense SwiGLU FFN of hidden 8192 (mlp_only_layers=[0]); layers
1..15 MoE with 8 routed SwiGLU experts of hidden 2048, top-2 with the top-k weights
renormalised (norm_topk_prob), and one shared SwiGLU expert of hidden 2048; no aux loss
(output_router_logits off). Where it differs from 1B_moe: the router scores with a softmax,
not a sigmoid (the same top-2 and renormalisation, a negligible share of the FLOPs), and
Qwen2-MoE scales the shared expert's output by a learned sigmoid gate (2048 weights a layer).

Experts implementation: transformers 5.x dispatches the routed experts through
`experts_implementation` ("eager" loops over experts, "grouped_mm", "batched_mm", ...);
--experts IMPL sets it (model.set_experts_implementation), default the library's own. Under
autocast, torch's grouped_mm is not on the autocast list, so with fp32 master weights the
"grouped_mm" path would multiply in fp32 (or, compiled, fall back to a per-expert loop);
unless --no-bf16-experts, this script casts the grouped GEMM's operands to bf16 as autocast
casts every nn.Linear, and says so in the JSON ("experts_bf16_cast").

    python3 tools/bench/hf_moe_train.py --mode eager|compile --steps 12 --warmup 3 --batch 4 --seq 2048 \
        [--experts eager|grouped_mm|batched_mm] [--trace FILE]
"""
import argparse, dataclasses, inspect, json, statistics, sys, time

import torch
import torch.nn.functional as F
import transformers
from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

ROPE_THETA = 500000.0
WANT = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
            num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, max_position_embeddings=8192,
            tie_word_embeddings=False, hidden_act="silu", num_experts=8, num_experts_per_tok=2,
            moe_intermediate_size=2048, shared_expert_intermediate_size=2048, mlp_only_layers=[0],
            decoder_sparse_step=1, norm_topk_prob=True, output_router_logits=False, router_aux_loss_coef=0.0,
            qkv_bias=False, use_sliding_window=False, attention_dropout=0.0, use_cache=False)


def config_fields(cls):
    """The constructor's named arguments: dataclass fields (transformers 5's strict configs)
    or __init__'s parameters (4.x)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return {n for n, p in inspect.signature(cls.__init__).parameters.items()
            if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL) and n != "self"}


def moe_1b_config():
    """Qwen2MoeConfig with 1B_moe's dimensions. All fields go to the constructor; should a
    strict config refuse one, those it does not name are set as attributes afterwards. What
    the config ends up holding is checked against WANT and any difference said on stderr."""
    fields = config_fields(Qwen2MoeConfig)
    v5_rope = "rope_parameters" in fields or "rope_parameters" in getattr(Qwen2MoeConfig, "__annotations__", {})
    rope = ({"rope_parameters": {"rope_type": "default", "rope_theta": ROPE_THETA}} if v5_rope
            else {"rope_theta": ROPE_THETA})
    late = {}
    try:
        cfg = Qwen2MoeConfig(**WANT, **rope, attn_implementation="sdpa")
    except (TypeError, ValueError) as e:  # an unknown name under a strict config
        print(f"hf_moe_train: Qwen2MoeConfig refused the full set ({e}); passing only its named fields",
              file=sys.stderr)
        kw = {k: v for k, v in {**WANT, **rope}.items() if k in fields}
        late = {k: v for k, v in {**WANT, **rope}.items() if k not in fields}
        cfg = Qwen2MoeConfig(**kw)
        late["_attn_implementation"] = "sdpa"
    for k, v in late.items():
        try:
            setattr(cfg, k, v)
        except Exception as e:  # noqa: BLE001 -- a strict config may refuse a name; say so, go on
            print(f"hf_moe_train: config field {k}={v!r} not settable: {e}", file=sys.stderr)
    if late:
        print(f"hf_moe_train: set after construction: {sorted(late)}", file=sys.stderr)
    types = getattr(cfg, "layer_types", None)
    if isinstance(types, list) and len(types) != cfg.num_hidden_layers:  # derived at construction
        cfg.layer_types = ["full_attention"] * cfg.num_hidden_layers
    off = {k: getattr(cfg, k, "<absent>") for k, v in WANT.items() if getattr(cfg, k, "<absent>") != v}
    theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", getattr(cfg, "rope_theta", None))
    if theta != ROPE_THETA:
        off["rope_theta"] = theta
    if off:
        print(f"hf_moe_train: WARNING: config differs from 1B_moe's: {off}", file=sys.stderr)
    return cfg


def install_bf16_grouped_mm():
    """Make transformers' grouped-GEMM experts path multiply in bf16 under autocast, as
    autocast does for nn.Linear (torch's grouped_mm is not on autocast's list). Returns what
    was wrapped, or None."""
    try:
        import transformers.integrations.moe as moe
    except ImportError:
        return None

    def bf16(a, b):
        # The model only ever runs under bf16 autocast here, so fp32 operands are autocast's to cast
        # (no autocast-state query: it would have to be traced by torch.compile too).
        if a.dtype == torch.float32 and b.dtype == torch.float32:
            return a.to(torch.bfloat16), b.to(torch.bfloat16)
        return a, b

    if hasattr(moe, "_grouped_mm"):  # transformers' dispatcher (grouped_mm or its fallback)
        orig = moe._grouped_mm

        def _grouped_mm(input, weight, offs):  # noqa: A002 -- the wrapped function's names
            input, weight = bf16(input, weight)
            return orig(input, weight, offs=offs)

        moe._grouped_mm = _grouped_mm
        return "transformers.integrations.moe._grouped_mm"
    wrapped = []
    for owner, name in ((torch.nn.functional, "grouped_mm"), (torch, "_grouped_mm")):
        if hasattr(owner, name):  # earlier 5.x call torch's directly
            orig_t = getattr(owner, name)

            def make(orig_t):
                def grouped(a, b, *args, **kwargs):
                    a, b = bf16(a, b)
                    return orig_t(a, b, *args, **kwargs)
                return grouped

            setattr(owner, name, make(orig_t))
            wrapped.append(f"{owner.__name__}.{name}")
    return ",".join(wrapped) or None


def experts_impl(model):
    get = getattr(model, "get_experts_implementation", None)
    if get is not None:
        try:
            return get().get("")
        except Exception:  # noqa: BLE001
            pass
    return getattr(model.config, "_experts_implementation", None)


def count_params(model, cfg):
    """Total parameters and those one token uses: all but the (E - k) / E routed experts not
    chosen. Routed experts are parameters under `.mlp.experts.` (a stacked 3-D tensor in 5.x,
    a ModuleList of MLPs in 4.x)."""
    total = routed = emb = 0
    for name, p in model.named_parameters():
        total += p.numel()
        if ".mlp.experts." in name:
            routed += p.numel()
        if "embed_tokens" in name:
            emb += p.numel()
    active = total - routed + routed * cfg.num_experts_per_tok // cfg.num_experts
    return total, active, emb


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--experts", help="experts_implementation (eager | grouped_mm | batched_mm ...); "
                                      "default: the library's")
    ap.add_argument("--no-bf16-experts", action="store_true",
                    help="leave the grouped GEMM in the dtype autocast gives it (fp32 with fp32 master weights)")
    ap.add_argument("--trace", help="write a Chrome trace of one extra, untimed step here")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    cfg = moe_1b_config()
    t0 = time.perf_counter()
    try:
        with torch.device(dev):  # initialise on the GPU: minutes faster than the CPU for ~2.5e9 weights
            model = Qwen2MoeForCausalLM(cfg)
    except Exception as e:  # noqa: BLE001
        print(f"hf_moe_train: building on the GPU failed ({e}); building on the CPU", file=sys.stderr)
        model = Qwen2MoeForCausalLM(cfg).to(dev)
    if any(p.dtype != torch.float32 for p in model.parameters()):
        model.float()  # fp32 master weights
    model.train()
    build_s = time.perf_counter() - t0
    cfg = model.config
    if a.experts:
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation(a.experts)
        else:
            for attr in ("_experts_implementation", "_experts_implementation_internal"):
                try:
                    setattr(cfg, attr, a.experts)
                    break
                except AttributeError:
                    pass
            print(f"hf_moe_train: no set_experts_implementation; set config.{attr}", file=sys.stderr)
    impl = experts_impl(model)
    shim = None if a.no_bf16_experts else install_bf16_grouped_mm()
    n_moe = sum(hasattr(layer.mlp, "experts") for layer in model.model.layers)
    total, active, emb = count_params(model, cfg)
    print(f"hf_moe_train: transformers {transformers.__version__}, torch {torch.__version__}; built in {build_s:.1f} s; "
          f"{n_moe} MoE layers of {len(model.model.layers)}; experts implementation {impl}; bf16 grouped GEMM via "
          f"{shim}; attention {getattr(cfg, '_attn_implementation', None)}", file=sys.stderr)
    print(f"hf_moe_train: config {cfg.to_json_string() if hasattr(cfg, 'to_json_string') else cfg}", file=sys.stderr)
    if n_moe != WANT["num_hidden_layers"] - len(WANT["mlp_only_layers"]):
        print(f"hf_moe_train: WARNING: expected 15 MoE layers, found {n_moe}", file=sys.stderr)

    if a.mode == "compile":
        # Should a graph break inside the decoder layer split the model into per-layer frames,
        # let all 16 layers keep a compiled graph (dynamo's default is 8 per code object;
        # past it a layer would silently run eager). fsdp2_train.py does the same.
        from torch import _dynamo
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(_dynamo.config, name):
                setattr(_dynamo.config, name, max(getattr(_dynamo.config, name), 64))
    step_model = torch.compile(model) if a.mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def step():
        tokens = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen).to(dev, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_model(input_ids=inputs, use_cache=False).logits  # [b, T, V]
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        losses.append(step())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    steady = times[a.warmup:] or times
    hd = WANT["hidden_size"] // WANT["num_attention_heads"]
    print(json.dumps({"impl": "hf-moe-" + a.mode, "model": type(model).__name__, "experts_implementation": impl,
                      "experts_bf16_cast": shim, "total_params": total, "active_params": active,
                      "active_params_no_embedding": active - emb,
                      "flops_per_token": 6 * (active - emb) + 12 * WANT["num_hidden_layers"]
                      * WANT["num_attention_heads"] * hd * a.seq,
                      "batch": a.batch, "seq": a.seq, "tokens_per_s": a.batch * a.seq / statistics.median(steady),
                      "steps_timed": len(steady), "step_times_s": times,
                      "peak_allocated_bytes": torch.cuda.max_memory_allocated(), "first_loss": losses[0],
                      "last_loss": losses[-1], "build_s": build_s, "torch": torch.__version__,
                      "transformers": transformers.__version__}), flush=True)

    if a.trace:  # printed first, so a profiler failure cannot lose the result
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        prof.export_chrome_trace(a.trace)


if __name__ == "__main__":
    main()
