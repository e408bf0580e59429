"""Writes a LlamaForCausalLM with random weights, saved by transformers itself
(save_pretrained, safetensors), for tests/hf/hf_load.sh. Weights are drawn wide enough
(and norms away from 1) that a misplaced row or a swapped projection moves the loss.

Usage: python3 make_hf_weights.py MESHTRAIN_CONFIG_JSON OUT_DIR
"""
import json
import shutil
import sys

import torch

from compare_hf import build_config


def main():
    config_path, out = sys.argv[1], sys.argv[2]
    torch.manual_seed(3)
    import transformers
    model = transformers.LlamaForCausalLM(build_config(json.load(open(config_path)))).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            elif "embed_tokens" in name:
                p.normal_(0, 1)
            else:
                p.normal_(0, 1.5 / p.shape[1] ** 0.5)
    model.save_pretrained(out, safe_serialization=True)
    # compare_hf.py reads meshtrain's config keys (transformers 5 moved rope_theta).
    shutil.copy(config_path, f"{out}/config.json")


if __name__ == "__main__":
    main()
