#!/usr/bin/python3
"""One rank of PyTorch DistributedDataParallel (gloo) on a Tessera model file, for bench_scaling.py
and bench_netlab.py: two warm-up steps, then --steps timed steps between barriers (with --skip,
inside no_sync(): no reduction); rank 0 prints "ddp_step_s SECONDS" per step. With --alternate P,
P pairs of such blocks instead, the first of each pair inside no_sync(), the second with its
reductions: rank 0 prints "ddp_pair_s SKIPPED REDUCED" (seconds per step) for each pair. Rank and size come
from the options or from Open MPI's environment; the rendezvous host is $NETLAB_MASTER (a netlab
lab's first node) or 127.0.0.1."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--skip", action="store_true", help="no reductions (no_sync)")
    ap.add_argument("--alternate", type=int, default=0, metavar="P",
                    help="P pairs of timed blocks: without reductions, then with them")
    ap.add_argument("--memory-format", choices=("contiguous", "channels_last"), default="channels_last",
                    help="the model's and input's memory format (default channels_last)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: the cores / ranks on this node)")
    ap.add_argument("--port", required=True)
    ap.add_argument("--rank", type=int, default=int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    ap.add_argument("--world", type=int, default=int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
    a = ap.parse_args()
    local = int(os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE", "1"))
    torch.set_num_threads(a.threads or max(1, len(os.sched_getaffinity(0)) // local))
    master = os.environ.get("NETLAB_MASTER", "127.0.0.1")
    dist.init_process_group("gloo", init_method="tcp://%s:%s" % (master, a.port), rank=a.rank, world_size=a.world)
    torch.manual_seed(1)
    net, spec = torch_model.load(a.model)
    mf = torch.channels_last if a.memory_format == "channels_last" else torch.contiguous_format
    net = net.to(memory_format=mf)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    loss_fn = torch_model.make_loss(spec)
    opt = torch_model.make_optimizer(spec, ddp.parameters())
    x = torch.randn((a.batch,) + net.input_shape()).to(memory_format=mf)
    y = torch.randn((a.batch,) + net.output_shape())

    def step(skip=a.skip):
        opt.zero_grad(set_to_none=True)
        if skip:
            with ddp.no_sync():
                loss_fn(ddp(x), y).backward()
        else:
            loss_fn(ddp(x), y).backward()
        opt.step()

    def block(skip):
        dist.barrier()
        t = time.perf_counter()
        for _ in range(a.steps):
            step(skip)
        dist.barrier()
        return (time.perf_counter() - t) / a.steps

    for _ in range(2):
        step()
    if a.alternate:
        for _ in range(a.alternate):
            off = block(True)
            on = block(False)
            if a.rank == 0:
                print("ddp_pair_s %.6f %.6f" % (off, on), flush=True)
    else:
        s = block(a.skip)
        if a.rank == 0:
            print("ddp_step_s %.6f" % s, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
