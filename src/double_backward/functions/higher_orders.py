"""Derivatives of any order, and Functions differentiable to any order.

:func:`derivatives` takes derivative after derivative with ``create_graph=True``.
:class:`Sin` and :class:`Cos` are differentiable to any order: each one's backward is made
of the other.

The derivative of sin is cos and the derivative of cos is −sin. When :class:`Sin`'s
backward calls :class:`Cos` and :class:`Cos`'s backward calls :class:`Sin`, every
backward is itself a Function with a backward, so autograd can go on differentiating
for as long as it is asked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._validation import check_real_tensor


def derivatives(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, order: int
) -> list[torch.Tensor]:
    """Return [f(x), f'(x), ..., f⁽ᵒʳᵈᵉʳ⁾(x)] of an elementwise ``fn``, elementwise.

    Each derivative is the gradient of the sum of the previous one, with
    ``create_graph=True``. A derivative with no graph back to x does not depend on x, so
    every later derivative is zero.
    """
    if not isinstance(order, int) or order < 0:
        raise ValueError(
            f"derivatives: 'order' must be a whole number >= 0, got {order!r}"
        )
    x = x.detach().requires_grad_()
    values = [fn(x)]
    for _ in range(order):
        if not values[-1].requires_grad:
            values.append(torch.zeros_like(x))
            continue
        (grad,) = torch.autograd.grad(
            values[-1].sum(), x, create_graph=True, allow_unused=True
        )
        values.append(torch.zeros_like(x) if grad is None else grad)
    return values


class Sin(torch.autograd.Function):
    """y = sin x, saving x; backward is grad_out · Cos(x), itself differentiable."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Sin", "x", x)
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * Cos.apply(x)


class Cos(torch.autograd.Function):
    """y = cos x, saving x; backward is −grad_out · Sin(x), itself differentiable."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Cos", "x", x)
        ctx.save_for_backward(x)
        return torch.cos(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return -grad_out * Sin.apply(x)
