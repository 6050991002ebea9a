"""The training steps the page "Double backward under DDP and FSDP" measures.

They live in the package, not on the page, because the page's processes are spawned: each
imports them by name (a function defined in a sphinx-gallery script or a notebook cannot
be imported by a new process). Each step takes the model (wrapped or not) and a share of
the batch, and returns the loss to backward, or ``None`` when it ran backward itself; each
is written as a training script writes it.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.func import functional_call

from .sync import synchronized_gradients


def make_critic() -> nn.Module:
    """A small critic, float64 so that the comparison's rounding is tiny: 4 -> 16 -> 16 -> 1."""
    return nn.Sequential(
        nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1)
    ).double()


def make_critic_without_last_bias() -> nn.Module:
    """The same critic with no bias in its last layer: the R1 penalty reaches every parameter."""
    return nn.Sequential(
        nn.Linear(4, 16),
        nn.Tanh(),
        nn.Linear(16, 16),
        nn.Tanh(),
        nn.Linear(16, 1, bias=False),
    ).double()


def batch(size: int = 8) -> torch.Tensor:
    """The batch the page splits between the processes: ``size`` samples of 4 features."""
    return torch.randn(
        size, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64
    )


def r1_penalty(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """R1 on its own, as a lazy-regularisation step runs it: the squared input gradient."""
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return (grad_x * grad_x).sum()


def critic_loss_and_r1(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The critic's own loss and R1 in one backward (a non-saturating loss on real data)."""
    x = x.detach().requires_grad_()
    out = model(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return nn.functional.softplus(-out).mean() + (grad_x * grad_x).sum()


def r1_plus_zero_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """R1 on its own plus ``0 * out.sum()``: the same gradient, and every parameter gets one."""
    x = x.detach().requires_grad_()
    out = model(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return (grad_x * grad_x).sum() + 0 * out.sum()


def r1_synchronized(model: nn.Module, x: torch.Tensor) -> None:
    """R1 on its own inside :func:`synchronized_gradients`: the gradients averaged explicitly."""
    with synchronized_gradients(model):
        r1_penalty(model, x).backward()


def penalty_on_x_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``out.backward(create_graph=True)``, then a penalty on ``x.grad``."""
    x = x.detach().requires_grad_()
    model(x).sum().backward(create_graph=True)
    return (x.grad * x.grad).sum()


def penalty_on_x_grad_synchronized(model: nn.Module, x: torch.Tensor) -> None:
    """The same step inside :func:`synchronized_gradients`."""
    with synchronized_gradients(model):
        penalty_on_x_grad(model, x).backward()


def maml_step(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """MAML-style: one inner SGD step with ``grad(create_graph=True)``, then the outer loss
    of the adapted parameters (the first half of the share adapts, the second evaluates)."""
    support, query = x.chunk(2)
    inner_loss = model(support).pow(2).mean()
    names, params = zip(*_unwrapped(model).named_parameters(), strict=True)
    grads = torch.autograd.grad(inner_loss, params, create_graph=True)
    adapted = {
        name: p - 0.1 * g for name, p, g in zip(names, params, grads, strict=True)
    }
    return functional_call(_unwrapped(model), adapted, (query,)).pow(2).mean()


def _unwrapped(model: nn.Module) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def create_graph_warnings(rank: int, world_size: int) -> list[str]:
    """What torch's C++ code writes to standard error, line by line, when a rank runs a
    backward with ``create_graph=True`` under DDP. torch logs its DDP warning there (not
    through Python's warnings), and only with ``TORCH_CPP_LOG_LEVEL=WARNING`` or lower set
    before torch is imported."""
    import os
    import tempfile

    from torch.nn.parallel import DistributedDataParallel

    model = DistributedDataParallel(make_critic())
    x = batch()[rank::world_size]
    with tempfile.TemporaryFile() as captured:
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            model(x).sum().backward(create_graph=True)
        except RuntimeError:
            pass  # DDP's in-place all-reduce of a gradient that has a graph; not shown here
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        return captured.read().decode(errors="replace").splitlines()
