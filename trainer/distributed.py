"""Several training processes (``accelerate launch``, ``torchrun``): who is who, and the few collectives.

Each process samples and scores its own share of the prompts (whole groups); the rewards, lengths and other
per-completion numbers are then gathered from every process BEFORE any group or batch statistic (per-process
statistics are wrong as soon as a statistic spans processes, as a group may), every process keeps
its slice of the advantages, and DDP averages the gradients. Token-level metrics are reduced as (sum, count),
never as a mean of per-process means. Only process 0 writes the run store, the checkpoints and the wandb mirror.

One process (no ``WORLD_SIZE`` above 1) needs none of this: ``Dist()`` makes every collective the identity and
accelerate is not even imported.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch


class WorldSizeError(RuntimeError):
    """The processes are not the ``WORLD_SIZE`` the launcher promised (a user error: one line, exit 2)."""


@dataclass
class Dist:
    rank: int = 0
    world_size: int = 1
    device: torch.device | None = None  # the process's device under a launcher (None: the config decides)
    _comm: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where collectives run

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """Concatenate every process's x along dim 0, in rank order (all processes get the whole)."""
        if self.world_size == 1:
            return x
        import torch.distributed as td

        local = x.to(self._comm).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        td.all_gather(parts, local)
        return torch.cat(parts).to(x.device)

    def _all_reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        if self.world_size == 1:
            return x
        import torch.distributed as td

        y = x.detach().to(self._comm).clone()
        td.all_reduce(y, op=getattr(td.ReduceOp, op))
        return y.to(x.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Σ over processes (identity in one process; no gradient flows through it)."""
        return self._all_reduce(x, "SUM")

    def max(self, x: torch.Tensor) -> torch.Tensor:
        return self._all_reduce(x, "MAX")

    def any(self, flag: bool) -> bool:
        """True on every process when it is True on any (a stop signal seen by one process stops all)."""
        return bool(self.max(torch.tensor([float(flag)])).item()) if self.world_size > 1 else flag

    def broadcast(self, obj):
        """Process 0's picklable object, on every process."""
        if self.world_size == 1:
            return obj
        import torch.distributed as td

        box = [obj]
        td.broadcast_object_list(box, src=0)
        return box[0]

    def close(self) -> None:
        """Every process, once training ended normally: wait for the others, then leave the process group. A
        process that exits without leaving it can abort at exit (``terminate called without an active exception``:
        a communication thread of the group still running), and its launcher then reports the run as failed."""
        if self.world_size == 1:
            return
        import torch.distributed as td

        if td.is_initialized():
            td.barrier()
            td.destroy_process_group()

    def wrap(self, module: torch.nn.Module, find_unused_parameters: bool = False) -> torch.nn.Module:
        """DistributedDataParallel around the module (averaged gradients); the module itself in one process."""
        if self.world_size == 1:
            return module
        ids = [self.device.index] if self.device is not None and self.device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(module, device_ids=ids,
                                                         find_unused_parameters=find_unused_parameters)


def setup(cpu: bool = False) -> Dist:
    """The processes as the launcher set them up; refuses a world size that disagrees with ``WORLD_SIZE``.

    Some launch commands silently start one process, or several that each believe they are rank 0 of 1
    (a known trap of some launch configurations): both would train on the wrong batch and write the store twice.
    """
    try:
        expected = int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise WorldSizeError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a number") from None
    if expected <= 1:
        return Dist()
    from accelerate import Accelerator

    try:
        accelerator = Accelerator(cpu=cpu or not torch.cuda.is_available())
    except (ValueError, RuntimeError) as e:  # WORLD_SIZE set by hand, with no launcher's rendezvous
        raise WorldSizeError(f"WORLD_SIZE is {expected} but the processes cannot be set up: "
                          f"{str(e).splitlines()[0]}") from None
    seen = accelerator.num_processes
    if seen != expected:
        raise WorldSizeError(
            f"WORLD_SIZE is {expected} but accelerate set up {seen} process(es) (distributed type "
            f"{accelerator.distributed_type}); on CPU launch with `ACCELERATE_USE_CPU=true accelerate launch "
            f"--multi_gpu --num_processes {expected} ...` or `torchrun --nproc_per_node {expected} ...`")
    comm = accelerator.device if accelerator.device.type == "cuda" else torch.device("cpu")  # nccl needs cuda
    return Dist(rank=accelerator.process_index, world_size=seen, device=accelerator.device, _comm=comm)
