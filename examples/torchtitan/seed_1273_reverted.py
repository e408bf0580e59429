"""torchtitan's train entry point with the seed's bug put back: a canary (examples/torchtitan.yaml).

Before torchtitan #1273, SimpleFSDP registered its all-gather on each weight through
torch.nn.utils.parametrize, which renames every weight in the state dict
(`tok_embeddings.parametrizations.weight.original`). A DCP checkpoint saved under data
parallelism then did not load into a model without it ([dp:4] -> [tp:4]): "Missing key in
checkpoint state_dict". The fix (`_register_parametrization` in simple_fsdp.py) keeps the names.
This script reverts that fix in memory, as the commented-out call in simple_fsdp.py still shows
it, then runs `python -m torchtitan.train` with the same arguments. torchtitan is not modified.
"""
import runpy

from torch.nn.utils import parametrize

import torchtitan.experiments.simple_fsdp.simple_fsdp as simple_fsdp


def register_parametrization_before_1273(module, param_names, parametrization):
    for name in param_names:
        parametrize.register_parametrization(module, name, parametrization, unsafe=True)


simple_fsdp._register_parametrization = register_parametrization_before_1273
runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)
