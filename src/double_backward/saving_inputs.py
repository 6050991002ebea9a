"""Case 1 of the tutorial: the tensor backward needs is an *input* of forward."""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class Square(torch.autograd.Function):
    r"""Compute :math:`y = x^2`, saving the input :math:`x` for backward.

    Backward returns :math:`\bar{x} = 2x\,\bar{y}`. The saved :math:`x` is an input, so it
    carries its own history (it is a leaf that requires grad, or has a ``grad_fn``). When
    backward runs under ``create_graph=True``, autograd records ``2 * x * grad_out`` like any
    other computation, and the resulting ``grad_x`` has a graph back to ``x``: double backward
    works with nothing extra to do.
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
