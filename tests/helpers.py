"""Shared test helpers: the correct Functions with their native twins, derivatives, graph walks."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from double_backward import Cube, Exp, Square, sinh

# Each correct Function of the tutorial next to the native op it must match, to every order.
CORRECT_FUNCTIONS = [
    pytest.param(Square.apply, lambda x: x**2, id="Square"),
    pytest.param(Exp.apply, torch.exp, id="Exp"),
    pytest.param(sinh, torch.sinh, id="Sinh"),
    pytest.param(Cube.apply, lambda x: x**3, id="Cube"),
]


def derivatives(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, order: int
):
    """Return [f(x), f'(x), ..., f^(order)(x)] of an elementwise ``fn``, elementwise.

    Each derivative is taken with ``create_graph=True`` from the previous one. A derivative that
    no longer depends on ``x`` (no graph back to it) has derivative zero from then on.
    """
    x = x.detach().requires_grad_()
    results = [fn(x)]
    for _ in range(order):
        current = results[-1]
        if not current.requires_grad:
            results.append(torch.zeros_like(x))
            continue
        (grad,) = torch.autograd.grad(
            current.sum(), x, create_graph=True, allow_unused=True
        )
        results.append(torch.zeros_like(x) if grad is None else grad)
    return results
