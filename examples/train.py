"""Data-parallel training on CPU, for torchrun: every rank averages its gradients and its loss
with the others (gloo all-reduce) and stops at breakpoint() after the second step.

    PYTHONBREAKPOINT=monarch_pdb.set_trace torchrun --nproc-per-node 4 examples/train.py
    monarch-pdb debug      # list, cast train ranks(:) p loss, continue

TRAIN_TIMEOUT sets the process group's timeout in seconds (torch's default otherwise).
"""

import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def average(tensor: torch.Tensor) -> torch.Tensor:
    dist.all_reduce(tensor)
    return tensor / dist.get_world_size()


def main() -> None:
    timeout = os.environ.get("TRAIN_TIMEOUT")
    dist.init_process_group("gloo", timeout=timedelta(seconds=float(timeout)) if timeout else None)
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        inputs, targets = torch.randn(32, 8), torch.randn(32, 1)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        for param in model.parameters():
            param.grad = average(param.grad)
        optimizer.step()
        mean_loss = average(loss.detach().clone())
        # One write for the whole line: unbuffered (PYTHONUNBUFFERED), print writes the text and its
        # newline apart, and the ranks' lines, which share torchrun's stdout, then run together.
        sys.stdout.write(f"rank {rank} step {step} loss {loss.item():.6f}\n")
        sys.stdout.flush()
        if step == 1:
            breakpoint()
    dist.destroy_process_group()
    if rank == 0:
        print(f"trained: mean loss {mean_loss.item():.6f}", flush=True)


if __name__ == "__main__":
    main()
