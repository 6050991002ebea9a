"""What ``fully_shard`` does to the parameters a gradient penalty's second backward reads.

Run on each rank by :func:`~double_backward.distributed.launch.launch`, for the page:
:func:`unsharded_storage` follows the first layer's unsharded weight (the tensor the
forward pass used, and saved for backward) through an R1 step, and reports its storage's
size in bytes at each point.
"""

from __future__ import annotations

import contextlib

import torch

from .steps import batch, make_critic
from .sync import synchronized_gradients


def unsharded_storage(rank: int, world_size: int) -> dict[str, dict[str, int | str]]:
    """Bytes in the first layer's unsharded weight's storage during an R1 step, with
    ``reshard_after_forward`` True and False, and inside :func:`synchronized_gradients`;
    whether the second backward runs."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    found = {}
    configurations = (
        ("reshard_after_forward=True", True, False),
        ("reshard_after_forward=False", False, False),
        ("synchronized_gradients", True, True),
    )
    for name, reshard, synchronized in configurations:
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        torch.manual_seed(0)
        model = make_critic()
        for layer in (model[0], model[2], model[4]):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
        used: list[torch.Tensor] = []
        # FSDP's own pre-forward hook runs first (it is prepended): this sees the
        # unsharded weight the layer computes with.
        model[0].register_forward_pre_hook(
            lambda module, args, used=used: used.append(module.weight)
        )
        x = batch().chunk(world_size)[rank].requires_grad_()
        sizes: dict[str, int | str] = {}
        with (
            synchronized_gradients(model) if synchronized else contextlib.nullcontext()
        ):
            out = model(x)
            sizes["after forward"] = used[0].untyped_storage().nbytes()
            (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
            sizes["after grad"] = used[0].untyped_storage().nbytes()
            try:
                (grad_x * grad_x).sum().backward()
                sizes["second backward"] = "runs"
            except RuntimeError as error:
                sizes["second backward"] = f"raises {str(error).split(':')[0]}: ..."
        found[name] = sizes
    return found
