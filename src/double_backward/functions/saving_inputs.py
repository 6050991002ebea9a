"""Case 1 of the tutorial: the tensor backward needs is an *input* of forward."""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class Square(torch.autograd.Function):
    """y = x², saving the input x for backward, which returns grad_x = grad_out · 2x.

    x is an input, so it keeps its history: under create_graph=True autograd records
    grad_out * 2 * x, and grad_x has a graph back to x. Double backward just works.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Square", "x", x)
        # An input: save_for_backward keeps its autograd history.
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # Plain differentiable torch ops: autograd records them when create_graph=True.
        return grad_out * 2 * x
