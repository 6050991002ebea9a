"""The tutorial's Functions in the modern style: ``forward`` without ``ctx``, ``setup_context``.

Splitting ``setup_context`` out of ``forward`` is what lets :mod:`torch.func` transforms
(``vmap``, ``grad``, ``jacrev``, ``hessian``) use a Function. Each Function here also has

- a ``jvp`` staticmethod, so forward-mode AD works (``jacfwd``, ``hessian``, ``jvp``): tensors
  it needs are saved with ``ctx.save_for_forward``;
- a vmap rule: ``generate_vmap_rule = True`` where forward is made of torch operations, a
  hand-written ``vmap`` staticmethod where it is not (the NumPy computation of
  :class:`CubeBackward`).
"""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor
from .untracked_backward import cube_backward_numpy


class Square(torch.autograd.Function):
    """y = x², saving the input x for backward (reverse mode) and jvp (forward mode)."""

    generate_vmap_rule = True  # forward is torch operations: vmap can batch it

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Square", "x", x)
        return x**2

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor
    ) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * 2 * x

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * x_tangent


class Exp(torch.autograd.Function):
    """y = eˣ, saving the output y for backward and jvp."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Exp", "x", x)
        return torch.exp(x)

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor
    ) -> None:
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (result,) = ctx.saved_tensors
        return grad_out * result

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor) -> torch.Tensor:
        (result,) = ctx.saved_tensors
        return result * x_tangent


class Cube(torch.autograd.Function):
    """y = x³ whose backward is the NumPy :class:`CubeBackward`, as in the tutorial."""

    generate_vmap_rule = True  # forward is x**3; the NumPy part has its own rule

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("Cube", "x", x)
        return x**3

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor
    ) -> None:
        (x,) = inputs
        ctx.save_for_backward(x)
        ctx.save_for_forward(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return CubeBackward.apply(grad_out, x)

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x**2 * x_tangent


class CubeBackward(torch.autograd.Function):
    """g = grad_out · 3x² computed by NumPy, with backward, jvp and vmap written by hand."""

    @staticmethod
    def forward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return cube_backward_numpy(grad_out, x)

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any
    ) -> None:
        grad_out, x = inputs
        ctx.save_for_backward(grad_out, x)
        ctx.save_for_forward(grad_out, x)

    @staticmethod
    def backward(ctx: Any, grad_g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad_out, x = ctx.saved_tensors
        return grad_g * 3 * x**2, grad_g * grad_out * 6 * x

    @staticmethod
    def jvp(
        ctx: Any, grad_out_tangent: torch.Tensor, x_tangent: torch.Tensor
    ) -> torch.Tensor:
        grad_out, x = ctx.saved_tensors
        return grad_out_tangent * 3 * x**2 + grad_out * 6 * x * x_tangent

    @staticmethod
    def vmap(info: Any, in_dims: tuple[int | None, int | None], grad_out, x):
        # NumPy cannot see vmap's batched tensors: put the batch dimension first on both
        # inputs and run the elementwise computation on the whole batch at once.
        grad_out_dim, x_dim = in_dims
        grad_out = (
            grad_out.movedim(grad_out_dim, 0) if grad_out_dim is not None else grad_out
        )
        x = x.movedim(x_dim, 0) if x_dim is not None else x
        if grad_out_dim is None:
            grad_out = grad_out.expand(info.batch_size, *grad_out.shape)
        if x_dim is None:
            x = x.expand(info.batch_size, *x.shape)
        return CubeBackward.apply(grad_out, x), 0
