"""The Hugging Face peer for tools/bench/gpu_bench.sh: LlamaForCausalLM with meshtrain's
1B configuration, trained the way meshtrain trains it -- fp32 master weights, bf16 compute
(autocast), SDPA attention, the same AdamW (fused), clip at 1.0, fp32 cross-entropy -- on
byte-range tokens like meshtrain's corpus. Prints one JSON line: median tokens/s over the
steps after warm-up, peak allocated bytes, and (with --trace) a Chrome trace of one step.

    python3 tools/bench/hf_train.py --mode eager|compile --steps 15 --batch 4 --seq 2048
"""
import argparse, json, statistics, time

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM


def llama_1b_config():
    # meshtrain's "1B" flavor (trainer/model/flavors.cpp): Llama-3.2-1B dimensions, untied output.
    return LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=500000.0,
                       max_position_embeddings=8192, tie_word_embeddings=False, attention_bias=False,
                       mlp_bias=False, attn_implementation="sdpa")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of the median")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--trace", help="write a Chrome trace of the last step here")
    a = ap.parse_args()

    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = LlamaForCausalLM(llama_1b_config()).to(dev)  # fp32 master weights
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    step_fn_model = torch.compile(model) if a.mode == "compile" else model
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    gen = torch.Generator(device="cpu").manual_seed(0)

    def step():
        tokens = torch.randint(0, 256, (a.batch, a.seq + 1), generator=gen).to(dev, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = step_fn_model(input_ids=inputs).logits  # [b, T, V]
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for s in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if a.trace and s == a.steps - 1:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                losses.append(step())
                torch.cuda.synchronize()
            prof.export_chrome_trace(a.trace)
            continue  # the profiled step is not timed
        losses.append(step())
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    steady = times[a.warmup:] or times
    print(json.dumps({"impl": "hf-" + a.mode, "params": n_params, "batch": a.batch, "seq": a.seq,
                      "tokens_per_s": a.batch * a.seq / statistics.median(steady),
                      "steps_timed": len(steady), "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                      "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
