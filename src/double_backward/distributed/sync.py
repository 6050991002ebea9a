"""A training step whose gradients are averaged over the ranks, penalty or not.

>>> with synchronized_gradients(model):  # model: DDP, fully_shard-ed, or plain
...     r1_penalty(model, x).backward()

Measured with torch 2.13 (the page "Double backward under DDP and FSDP" runs it): DDP
all-reduces a step's gradients only when every parameter received one in the backward it
watches, and ``fully_shard`` frees each layer's unsharded parameters after the first
backward, which a gradient penalty's second backward still needs. Inside this context:

- under ``DistributedDataParallel``, the step runs in
  ``no_sync()`` and the gradients are
  all-reduced and averaged explicitly at the end;
- under FSDP2 (``fully_shard``), the parameters stay unsharded until the step ends
  (``set_reshard_after_backward(False)``, no gradient reduce-scatter), then the full
  gradients are averaged, the parameters resharded and each rank's shard of the gradient
  put in ``.grad``. The step costs the memory of the unsharded model;
- a plain module is left alone, so the same code runs in one process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def synchronized_gradients(model: nn.Module) -> Iterator[None]:
    """Run a step (forward and backwards) whose ``.grad``\\ s end averaged over the ranks.

    The averaged gradients are detached: a graph that ``backward(create_graph=True)`` left
    in ``.grad`` is dropped.
    """
    from torch.nn.parallel import DistributedDataParallel

    if isinstance(model, DistributedDataParallel):
        with model.no_sync():
            yield
        for p in model.parameters():
            if p.grad is not None:
                p.grad = _averaged(p.grad)
        return
    shards = _fsdp_modules(model)
    if not shards:
        yield
        return
    root = shards[0]
    root.set_reshard_after_backward(False)  # recurses into every fully_shard-ed module
    root.set_requires_gradient_sync(False)
    try:
        yield
        # The modules hold their unsharded parameters now: average their full gradients.
        full = {}
        for name, p in model.named_parameters():
            if p.grad is not None:
                full[name] = _averaged(p.grad)
                p.grad = None
    finally:
        for module in shards:
            module.reshard()
        root.set_reshard_after_backward(True)
        root.set_requires_gradient_sync(True)
    from torch.distributed.tensor import distribute_tensor

    for name, p in model.named_parameters():  # sharded DTensors again
        if name in full:
            p.grad = distribute_tensor(full[name], p.device_mesh, p.placements)


def _averaged(grad: torch.Tensor) -> torch.Tensor:
    import torch.distributed as dist

    grad = grad.detach().clone()
    dist.all_reduce(grad)
    return grad / dist.get_world_size()


def _fsdp_modules(model: nn.Module) -> list[nn.Module]:
    """The ``fully_shard``-ed modules in ``model``, the root first; empty for other models."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # a torch without FSDP2
        return []
    if not isinstance(model, FSDPModule):
        return []
    return [module for module in model.modules() if isinstance(module, FSDPModule)]
