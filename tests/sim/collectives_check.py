"""Every collective of meshtest_sim against the exact answer, in N processes (tests/sim/sim_test.sh).

    python3 tests/sim/collectives_check.py WORLD DEVICE OUT   (DEVICE: cpu or cuda)

Starts WORLD ranks (multiprocessing, spawn) with MESHTEST_SIM=1 and sim/python first on the path,
as meshtest does for a `simulate: true` case; each initialises torch.distributed with backend
"nccl", which sim/python/sitecustomize.py maps onto meshtest_sim, runs every collective a trainer
or DCP uses on tensors whose right answer it computes itself, and writes OUT/rank<R>.txt: one line
per check, "ok NAME" or "FAILED NAME: why". Exit 0 only when every rank passed every check.
MESHTEST_SIM_FAULT (a planted collective bug) is passed through: then some checks must fail.
"""
import os
import pathlib
import sys

import torch.multiprocessing as mp


def values(rank, n, dtype, device):
    import torch
    # distinct per rank and element; exact in every dtype used here
    return (torch.arange(n, dtype=torch.float64) + 10 * (rank + 1)).to(dtype).to(device)


def run(rank, world, device_kind, out, port):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist

    lines = []

    def check(name, got, want):
        got, want = got.cpu(), want.cpu()
        same = got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
        lines.append(f"ok {name}" if same else f"FAILED {name}: got {got.tolist()} want {want.tolist()}")

    device = torch.device("cuda", torch.cuda.current_device()) if device_kind == "cuda" else torch.device("cpu")
    if device_kind == "cuda":
        torch.cuda.set_device(rank)  # mapped onto the one visible GPU
    dist.init_process_group("nccl", rank=rank, world_size=world)
    everyone = [values(r, 6, torch.float32, device) for r in range(world)]
    mine = everyone[rank]

    t = mine.clone()
    dist.all_reduce(t)
    check("all_reduce sum", t, sum(e.double() for e in everyone).float())
    if hasattr(dist.ReduceOp, "AVG"):
        t = mine.clone()
        try:
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            check("all_reduce avg", t, (sum(e.double() for e in everyone) / world).float())
        except (RuntimeError, ValueError) as e:  # torch 1.13 refuses AVG before it reaches a backend
            lines.append(f"ok all_reduce avg (refused by this torch: {str(e).splitlines()[0][:60]})")
    t = mine.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    check("all_reduce max", t, torch.stack(everyone).max(0).values)
    t = mine.clone()
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    check("all_reduce min", t, torch.stack(everyone).min(0).values)
    # bfloat16 sums in float32 and rounds once: the exact float32 sum, rounded
    t = values(rank, 6, torch.bfloat16, device) * 1.01
    dist.all_reduce(t)
    check("all_reduce bf16", t, sum((values(r, 6, torch.bfloat16, device) * 1.01).float() for r in range(world)).bfloat16())

    t = mine.clone() if rank == 1 % world else torch.zeros_like(mine)
    dist.broadcast(t, src=1 % world)
    check("broadcast", t, everyone[1 % world])

    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    check("all_gather", torch.stack(gathered), torch.stack(everyone))
    if hasattr(dist, "all_gather_into_tensor"):
        flat = torch.empty(world * 6, device=device)
        dist.all_gather_into_tensor(flat, mine)
        check("all_gather_into_tensor", flat, torch.cat(everyone))
        uneven = values(rank, 2 * world, torch.float32, device)
        piece = torch.empty(2, device=device)
        dist.reduce_scatter_tensor(piece, uneven)
        total = sum(values(r, 2 * world, torch.float32, device).double() for r in range(world)).float()
        check("reduce_scatter_tensor sum", piece, total[2 * rank:2 * rank + 2])
        dist.reduce_scatter_tensor(piece, uneven, op=dist.ReduceOp.AVG)
        check("reduce_scatter_tensor avg", piece, (total.double() / world).float()[2 * rank:2 * rank + 2])
    if hasattr(dist, "_make_nccl_premul_sum") and hasattr(dist, "reduce_scatter_tensor"):
        # FSDP2's reduction when the trainer sets its own gradient divide factor (torchtitan does)
        dist.reduce_scatter_tensor(piece, uneven, op=dist._make_nccl_premul_sum(0.5))
        check("reduce_scatter_tensor premul_sum", piece, (total.double() * 0.5).float()[2 * rank:2 * rank + 2])
        t = mine.clone()
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        check("all_reduce premul_sum", t, (sum(e.double() for e in everyone) * 0.5).float())
    chunks = list(values(rank, 2 * world, torch.float32, device).chunk(world))
    piece = torch.empty(2, device=device)
    dist.reduce_scatter(piece, chunks)
    total = sum(values(r, 2 * world, torch.float32, device).double() for r in range(world)).float()
    check("reduce_scatter", piece, total[2 * rank:2 * rank + 2])

    # all_to_all_single with uneven splits: rank r sends r + 1 + j rows to rank j
    send = [rank + 1 + j for j in range(world)]
    recv = [r + 1 + rank for r in range(world)]
    x = torch.cat([torch.full((n,), 100.0 * rank + j, device=device) for j, n in enumerate(send)])
    y = torch.empty(sum(recv), device=device)
    dist.all_to_all_single(y, x, output_split_sizes=recv, input_split_sizes=send)
    check("all_to_all_single", y, torch.cat([torch.full((n,), 100.0 * r + rank, device=device) for r, n in enumerate(recv)]))

    # point to point, receives posted before sends: a ring that deadlocks if a receive blocks early
    right, left = (rank + 1) % world, (rank - 1) % world
    incoming = torch.empty_like(mine)
    ops = [dist.P2POp(dist.irecv, incoming, left), dist.P2POp(dist.isend, mine.clone(), right)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    check("batch_isend_irecv ring", incoming, everyone[left])
    # Megatron's pipeline receives into a leaf that requires grad, with autograd on where it waits:
    # NCCL writes the bytes unseen by autograd, and so must the simulated receive.
    activation = torch.empty_like(mine, requires_grad=True)
    ops = [dist.P2POp(dist.irecv, activation, left), dist.P2POp(dist.isend, mine.clone(), right)]
    try:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        check("irecv into a leaf that requires grad", activation.detach(), everyone[left])
    except RuntimeError as e:
        lines.append(f"FAILED irecv into a leaf that requires grad: {e}")

    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank, "text": "x" * rank})
    lines.append("ok all_gather_object" if objects == [{"rank": r, "text": "x" * r} for r in range(world)]
                 else f"FAILED all_gather_object: {objects}")
    box = [f"from {0}"] if rank == 0 else [None]
    dist.broadcast_object_list(box, src=0)
    lines.append("ok broadcast_object_list" if box == ["from 0"] else f"FAILED broadcast_object_list: {box}")
    if hasattr(dist, "gather_object"):
        got = [None] * world if rank == 0 else None
        dist.gather_object(rank * 3, got, dst=0)
        lines.append("ok gather_object" if rank != 0 or got == [r * 3 for r in range(world)] else f"FAILED gather_object: {got}")
    if hasattr(dist, "scatter_object_list"):
        box = [None]
        dist.scatter_object_list(box, [f"to {r}" for r in range(world)] if rank == 0 else None, src=0)
        lines.append("ok scatter_object_list" if box == [f"to {rank}"] else f"FAILED scatter_object_list: {box}")

    if world >= 2:  # a subgroup of the first two ranks, and a group of one
        pair = dist.new_group([0, 1], backend="nccl")
        if rank < 2:
            t = mine.clone()
            dist.all_reduce(t, group=pair)
            check("new_group all_reduce", t, (everyone[0].double() + everyone[1].double()).float())
    dist.barrier()
    name = dist.get_backend()
    lines.append(f"ok backend {name}" if name == "meshtest_sim" else f"FAILED backend: {name}")
    dist.destroy_process_group()
    pathlib.Path(out, f"rank{rank}.txt").write_text("\n".join(lines) + "\n")


def main():
    world, device_kind, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(run, args=(world, device_kind, out, port), nprocs=world, start_method="spawn")
    failed = 0
    for r in range(world):
        for line in pathlib.Path(out, f"rank{r}.txt").read_text().splitlines():
            if not line.startswith("ok"):
                failed += 1
                print(f"rank {r}: {line}")
    print(f"collectives_check: {world} ranks on {device_kind}: {'every check passed' if not failed else f'{failed} failed'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
