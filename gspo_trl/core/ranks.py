"""One flag agreed by every process of a launch: a stop that one rank sees (Ctrl-C on one node,
a NaN in one shard) must stop all of them at the same step, or the others wait forever in the
next collective."""

from __future__ import annotations

from typing import Any


def any_rank(flag: bool, device: Any) -> bool:
    """True when any process of the launch has the flag set (the flag itself when alone); one
    all-reduce of a scalar on `device` (the Trainer's `args.device`) otherwise."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
