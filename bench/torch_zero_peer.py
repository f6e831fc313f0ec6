#!/usr/bin/env python3
"""PyTorch peer of hvtrain's sharded state (distribution.shard), for bench/shard.sh.

Data parallel on the CPU over gloo, one process per rank (torchrun), the same model (Linear+ReLU
layers), loss (softmax cross-entropy), optimizer (Adam, lr 1e-4) and global batch as the hvtrain
runs beside it, on random rows (the step's cost does not depend on the values). --mode:
  ddp         DistributedDataParallel, Adam on every rank (hvtrain: shard = "none")
  zero        DDP + torch.distributed.optim.ZeroRedundancyOptimizer(Adam) (ZeRO stage 1:
              hvtrain "optimizer")
  fsdp-grad   FSDP2 fully_shard(reshard_after_forward=False), FSDP's SHARD_GRAD_OP (ZeRO stage 2:
              hvtrain "gradients")
  fsdp-full   FSDP2 fully_shard(reshard_after_forward=True), FULL_SHARD (ZeRO stage 3; hvtrain
              has no counterpart yet)

  torchrun --nproc_per_node 2 bench/torch_zero_peer.py --mode zero --layers 784,8192,8192,8192,10

Rank 0 prints one line: PEER_RESULT {json} with samples_per_sec (median over the epochs after
the first; an "epoch" is --steps steps), every epoch's rate, peak_rss_mb per rank, and with
--checkpoint each save's seconds (torch.distributed.checkpoint, every rank its shards; for
bench/shard_ckpt.sh, with --test-rows an evaluation after each epoch); with --resume DIR the
seconds to load a checkpoint saved so into the model and optimizer before training
(bench/shard_resume.sh), and the peak RSS after the load.
"""
import argparse
import json
import resource
import statistics
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--mode", choices=["ddp", "zero", "fsdp-grad", "fsdp-full"], required=True)
ap.add_argument("--layers", default="784,8192,8192,8192,10")
ap.add_argument("--global-batch", type=int, default=32)
ap.add_argument("--epochs", type=int, default=3)
ap.add_argument("--steps", type=int, default=5, help="steps per epoch")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--checkpoint", default="", help="after every epoch, save model and optimizer state with "
                "torch.distributed.checkpoint (each rank its shards) into this folder; the seconds are reported")
ap.add_argument("--test-rows", type=int, default=0, help="after every epoch, evaluate this many rows per rank "
                "(512 at a time, no_grad)")
ap.add_argument("--resume", default="", help="before training, load model and optimizer state saved by --checkpoint "
                "(a folder such as CKPT/epoch0) with torch.distributed.checkpoint, timed")
args = ap.parse_args()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(args.threads)
torch.manual_seed(42)
sizes = [int(s) for s in args.layers.split(",")]
layers = []
for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
    layers.append(nn.Linear(a, b))
    if i < len(sizes) - 2:
        layers.append(nn.ReLU())
model = nn.Sequential(*layers)
if args.mode in ("ddp", "zero"):
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    if args.mode == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer

        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
else:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (world,))
    full = args.mode == "fsdp-full"
    for m in model:
        if isinstance(m, nn.Linear):
            fully_shard(m, mesh=mesh, reshard_after_forward=full)
    fully_shard(model, mesh=mesh, reshard_after_forward=full)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
batch = args.global_batch // world
x = torch.randn(batch, sizes[0])
y = torch.randint(0, sizes[-1], (batch,))
loss_fn = nn.CrossEntropyLoss()
rates, saves = [], []
resume_s, resume_rss = None, None
if args.resume:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    dist.barrier()
    t = time.perf_counter()
    msd, osd = get_state_dict(model, opt)
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=args.resume)
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    del msd, osd
    dist.barrier()
    resume_s = time.perf_counter() - t
    r = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
    each = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(each, r)
    resume_rss = [round(float(v), 1) for v in each]
for epoch in range(args.epochs):
    dist.barrier()
    t = time.perf_counter()
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    dist.barrier()
    rates.append(args.steps * args.global_batch / (time.perf_counter() - t))
    if args.test_rows:
        with torch.no_grad():
            for a in range(0, args.test_rows, 512):
                model(torch.randn(min(512, args.test_rows - a), sizes[0]))
    if args.checkpoint:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        dist.barrier()
        t = time.perf_counter()
        msd, osd = get_state_dict(model, opt)
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{args.checkpoint}/epoch{epoch}")
        dist.barrier()
        saves.append(time.perf_counter() - t)
rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0])
every = [torch.zeros(1) for _ in range(world)]
dist.all_gather(every, rss)
if rank == 0:
    print("PEER_RESULT " + json.dumps({
        "mode": args.mode, "ranks": world, "torch": torch.__version__,
        "samples_per_sec": statistics.median(rates[1:] or rates), "epochs": rates,
        "peak_rss_mb": [round(float(r), 1) for r in every], "loss": float(loss), "checkpoint_s": saves,
        "resume_s": resume_s, "resume_peak_rss_mb": resume_rss,
    }), flush=True)
dist.destroy_process_group()
