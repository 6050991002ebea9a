"""Tell a DDP- or FSDP-wrapped model from a plain one, for :func:`~double_backward.check_model`.

``check_model`` checks a plain module in one process. Given a wrapper, it would check the
wrapper's forward as a plain function (DDP's hooks only act with a process group, FSDP's
parameters are shards), which answers a different question: whether the gradient is
synchronized across processes is :func:`~double_backward.check_distributed`'s.
"""

from __future__ import annotations

from torch import nn


def wrapper_name(model: object) -> str | None:
    """``"DistributedDataParallel"``, ``"fully_shard"``, ``"FullyShardedDataParallel"``, or None."""
    import torch.distributed

    if not torch.distributed.is_available() or not isinstance(model, nn.Module):
        return None
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        return "DistributedDataParallel"
    try:  # FSDP2: fully_shard swaps the module's class for a subclass of FSDPModule
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
    except ImportError:  # pragma: no cover - every torch this package supports has both
        return None
    if isinstance(model, FSDPModule):
        return "fully_shard"
    if isinstance(model, FullyShardedDataParallel):
        return "FullyShardedDataParallel"
    return None


def wrapped_model_message(model: object) -> str | None:
    """For a DDP- or FSDP-wrapped model, what ``check_model`` should say instead; else None."""
    name = wrapper_name(model)
    if name is None:
        return None
    inner = (
        "model.module"
        if name == "DistributedDataParallel"
        else "the model before fully_shard"
    )
    return (
        f"this model is wrapped by {name}: check_model checks a plain module in one "
        f"process; pass {inner} to check_model, and check whether the gradient is "
        "synchronized across processes with double_backward.check_distributed(make_model, "
        'penalty, inputs, world_size=2, wrapper="ddp" or "fsdp")'
    )
