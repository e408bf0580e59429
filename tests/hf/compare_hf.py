"""meshtrain against Hugging Face transformers' LlamaForCausalLM, nobody here having written
the latter: the same weights (meshtrain ckpt consolidate --hf) and the same tokens (the prompt in
generate.json) must give the same mean next-token loss in fp32 (relative 1e-5) and the same
greedy continuation.

Usage: python3 compare_hf.py HF_DIR GENERATE_JSON
"""
import json
import sys

import torch
import transformers
from safetensors.torch import load_file


def build_config(cfg):
    """transformers' LlamaConfig from meshtrain's config.json."""
    keys = ["hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings", "hidden_act",
            "attention_bias", "mlp_bias"]
    kwargs = {k: cfg[k] for k in keys}
    try:  # transformers >= 5 keeps the RoPE base in rope_parameters
        config = transformers.LlamaConfig(**kwargs, rope_parameters={"rope_type": "default", "rope_theta": cfg["rope_theta"]})
    except TypeError:
        config = transformers.LlamaConfig(**kwargs, rope_theta=cfg["rope_theta"])
    config._attn_implementation = "eager"
    return config


def build_model(hf_dir):
    config = build_config(json.load(open(f"{hf_dir}/config.json")))
    model = transformers.LlamaForCausalLM(config).float().eval()
    state = load_file(f"{hf_dir}/model.safetensors")
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    if missing or unexpected:
        sys.exit(f"compare_hf: weights do not fit LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    return model


def main():
    hf_dir, generate_json = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    model = build_model(hf_dir)
    gen = json.load(open(generate_json))
    ids = torch.tensor([gen["prompt_ids"]])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:]).item()
        tokens = list(gen["prompt_ids"])
        for _ in range(len(gen["generated_ids"])):
            tokens.append(int(model(torch.tensor([tokens])).logits[0, -1].argmax()))
    ours = gen["prompt_loss"]
    rel = abs(loss - ours) / abs(ours)
    same_tokens = tokens[len(gen["prompt_ids"]):] == gen["generated_ids"]
    print(f"prompt loss: meshtrain {ours:.9f}, transformers {transformers.__version__} {loss:.9f}, "
          f"relative difference {rel:.2e} (<= 1e-5 required); greedy tokens {'equal' if same_tokens else 'DIFFER'}")
    sys.exit(0 if rel <= 1e-5 and same_tokens else 1)


if __name__ == "__main__":
    main()
