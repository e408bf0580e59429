"""meshtest's simulated world for any PyTorch trainer (docs/simulation.md#foreign-trainers).

meshtest puts this folder first on PYTHONPATH of every rank of a `simulate: true` case and sets
MESHTEST_SIM=1. Python imports this file at start-up, before the trainer's own code, and then:

- registers the c10d backend "meshtest_sim" (sim/meshtest_sim.cpp: collectives over meshtrain's
  shared-memory transport, reduced in rank order), built on first use against the torch that runs
  the trainer, into a cache keyed by that torch's version and the sources
  ($MESHTEST_SIM_CACHE, default ~/.cache/meshtest/sim), compiled from a copy kept there, so any
  checkout with the same sources reuses it;
- maps the trainer's NCCL onto it: `init_process_group("nccl")`, `new_group(backend="nccl")`,
  "cuda:nccl" in a device map, and the default backend of CUDA tensors;
- puts every rank on the one visible GPU: LOCAL_RANK becomes LOCAL_RANK mod the GPU count, and so
  does an index given to torch.cuda.set_device.

The trainer's code is not changed. Without MESHTEST_SIM this file only hands over to the next
sitecustomize on the path, as if it were not there.
"""
import functools
import hashlib
import importlib.util
import os
import pathlib
import sys

BACKEND = "meshtest_sim"
HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCES = ["sim/meshtest_sim.cpp", "trainer/distributed/shm_comm.cpp", "trainer/distributed/collective.cpp",
           "trainer/base/faults.cpp"]
HEADERS = ["trainer/distributed/shm_comm.h", "trainer/distributed/collective.h", "trainer/base/faults.h",
           "contract/rank_environment.h"]


@functools.lru_cache(maxsize=None)
def _extension():
    """The compiled backend for this torch, built once per torch version and source digest."""
    import torch
    from torch.utils import cpp_extension

    digest = hashlib.sha256(torch.__version__.encode())
    for name in SOURCES + HEADERS:
        digest.update((ROOT / name).read_bytes())
    tag = digest.hexdigest()[:12]
    cache = pathlib.Path(os.environ.get("MESHTEST_SIM_CACHE") or pathlib.Path.home() / ".cache" / "meshtest" / "sim")
    build = cache / f"torch-{torch.__version__}-{tag}"
    # The sources are compiled from a copy in the cache, not from this checkout: cpp_extension
    # rebuilds when the source paths change, and every clone (every CI run) has other paths.
    src = build / "src"
    for name in SOURCES + HEADERS:
        copy, text = src / name, (ROOT / name).read_bytes()
        if not copy.is_file() or copy.read_bytes() != text:
            copy.parent.mkdir(parents=True, exist_ok=True)
            partial = copy.with_name(f"{copy.name}.{os.getpid()}")
            partial.write_bytes(text)
            partial.replace(copy)  # atomic: ranks copying at once never see half a file
    # Debian's python3-torch keeps its headers in /usr/include, the C++ API's one level down.
    includes = [str(src / "trainer"), str(src)] + [p for p in ["/usr/include/torch/csrc/api/include"] if os.path.isdir(p)]
    return cpp_extension.load(name=f"meshtest_sim_{tag}", sources=[str(src / s) for s in SOURCES],
                              extra_include_paths=includes, extra_cflags=["-O2", "-std=c++17"], build_directory=str(build),
                              with_cuda=False, verbose=bool(os.environ.get("MESHTEST_SIM_VERBOSE")))


def _create(store, rank, size, timeout):
    return _extension().create(store, rank, size, timeout)


def _mapped(backend):
    """The backend string with NCCL replaced by meshtest_sim ("nccl", "cuda:nccl", "cpu:gloo,cuda:nccl")."""
    if backend is None:
        return None
    text = str(backend)
    if ":" not in text:
        return BACKEND if text.lower() == "nccl" else backend
    pairs = [part.split(":", 1) for part in text.split(",")]
    return ",".join(f"{device}:{BACKEND if name.lower() == 'nccl' else name}" for device, name in pairs)


def _install():
    import inspect

    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("meshtest_sim: this torch was built without torch.distributed")
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "cuda"])
        dist.Backend.default_device_backend_map["cuda"] = BACKEND
    else:  # torch 1.x: one backend per group, CPU and CUDA tensors alike
        dist.Backend.register_backend(BACKEND, _create)

    def mapping(function, position):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if "backend" in kwargs:
                kwargs["backend"] = _mapped(kwargs["backend"])
            elif len(args) > position:
                args = args[:position] + (_mapped(args[position]),) + args[position + 1:]
            return function(*args, **kwargs)
        return wrapper

    dist.init_process_group = mapping(dist.init_process_group, 0)
    dist.distributed_c10d.init_process_group = dist.init_process_group
    dist.new_group = mapping(dist.new_group, 2)
    dist.distributed_c10d.new_group = dist.new_group

    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        count = torch.cuda.device_count()
        if "LOCAL_RANK" in os.environ:
            os.environ["LOCAL_RANK"] = str(int(os.environ["LOCAL_RANK"]) % count)
        set_device = torch.cuda.set_device

        @functools.wraps(set_device)
        def set_device_here(device):
            if isinstance(device, int):
                device = device % count
            elif isinstance(device, torch.device) and device.index is not None:
                device = torch.device(device.type, device.index % count)
            elif isinstance(device, str) and ":" in device:
                kind, index = device.split(":", 1)
                device = f"{kind}:{int(index) % count}"
            return set_device(device)

        torch.cuda.set_device = set_device_here


def _next_sitecustomize():
    """Runs the sitecustomize that this one shadows, if any (Debian's, a virtualenv's)."""
    for entry in sys.path:
        if not entry or pathlib.Path(entry).resolve() == HERE:
            continue
        candidate = pathlib.Path(entry) / "sitecustomize.py"
        if candidate.is_file():
            spec = importlib.util.spec_from_file_location("_meshtest_next_sitecustomize", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


_next_sitecustomize()
if os.environ.get("MESHTEST_SIM"):
    _install()
