r"""Five other ways to write sinh, to compare what each way of saving costs.

:class:`~double_backward.Sinh` returns the intermediates :math:`e^{x}/2` and :math:`e^{-x}/2` as
extra outputs, saves them, and sets ``set_materialize_grads(False)``. Each variant here changes
one of those choices; all five are correct to the second derivative (the tests check them with
``gradgradcheck``), and the "What it costs" page measures them against :func:`torch.sinh`.

- :class:`SinhTutorial`: the form of PyTorch's tutorial, saving :math:`e^{\pm x}` and letting
  autograd materialise the unused gradients as zeros;
- :class:`SinhOutOfPlace`: the package's :class:`~double_backward.Sinh` as it was before the
  costs were measured: a new tensor for every step of forward, a sum of products in backward;
- :class:`SinhMaterialized`: that same form with the default ``set_materialize_grads(True)``;
- :class:`SinhRecompute`: saves only the input and recomputes the exponentials in backward;
- :class:`SinhNativeOps`: :func:`torch.sinh` forward and :func:`torch.cosh` backward, inside a
  custom Function.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._validation import check_real_tensor

_LN_2 = math.log(2.0)


class SinhTutorial(torch.autograd.Function):
    """The tutorial's form: saves eˣ and e⁻ˣ, returned as extra outputs; zeros materialised.

    Backward receives a zeros tensor for each unused extra output (the default
    ``set_materialize_grads(True)``) and multiplies it in anyway: two full-size products of
    nothing on every first backward, and ``0 · ∞ = nan`` where an exponential overflows.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_real_tensor("SinhTutorial", "x", x)
        exp_x = torch.exp(x)
        exp_neg_x = torch.exp(-x)
        ctx.save_for_backward(exp_x, exp_neg_x)
        return (exp_x - exp_neg_x) / 2, exp_x, exp_neg_x

    @staticmethod
    def backward(
        ctx: Any,
        grad_sinh: torch.Tensor,
        grad_exp_x: torch.Tensor,
        grad_exp_neg_x: torch.Tensor,
    ) -> torch.Tensor:
        exp_x, exp_neg_x = ctx.saved_tensors
        grad_x = grad_sinh * (exp_x + exp_neg_x) / 2
        # Zeros on the first backward, still multiplied and added.
        grad_x = grad_x + grad_exp_x * exp_x
        return grad_x - grad_exp_neg_x * exp_neg_x


class SinhOutOfPlace(torch.autograd.Function):
    """The package's :class:`~double_backward.Sinh` before it was measured: out of place.

    Saves the same tensors and sets ``set_materialize_grads(False)`` too, but each step of
    forward allocates a new tensor (``x - ln 2``, then its exponential, ...) and backward adds
    the products of the second backward one temporary at a time.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_real_tensor("SinhOutOfPlace", "x", x)
        half_exp_x = torch.exp(x - _LN_2)
        half_exp_neg_x = torch.exp(-x - _LN_2)
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)
        ctx.set_materialize_grads(False)
        return half_exp_x - half_exp_neg_x, half_exp_x, half_exp_neg_x

    @staticmethod
    def backward(
        ctx: Any,
        grad_sinh: torch.Tensor | None,
        grad_half_exp_x: torch.Tensor | None,
        grad_half_exp_neg_x: torch.Tensor | None,
    ) -> torch.Tensor | None:
        half_exp_x, half_exp_neg_x = ctx.saved_tensors
        terms = []
        if grad_sinh is not None:
            terms.append(grad_sinh * (half_exp_x + half_exp_neg_x))
        if grad_half_exp_x is not None:
            terms.append(grad_half_exp_x * half_exp_x)
        if grad_half_exp_neg_x is not None:
            terms.append(-grad_half_exp_neg_x * half_exp_neg_x)
        return sum(terms[1:], terms[0]) if terms else None


class SinhMaterialized(torch.autograd.Function):
    """:class:`SinhOutOfPlace` without ``set_materialize_grads(False)``.

    The same saved tensors (eˣ/2 and e⁻ˣ/2, returned as outputs), but backward always
    receives tensors: zeros for the extra outputs nobody used, multiplied in anyway.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_real_tensor("SinhMaterialized", "x", x)
        half_exp_x = torch.exp(x - _LN_2)
        half_exp_neg_x = torch.exp(-x - _LN_2)
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)
        return half_exp_x - half_exp_neg_x, half_exp_x, half_exp_neg_x

    @staticmethod
    def backward(
        ctx: Any,
        grad_sinh: torch.Tensor,
        grad_half_exp_x: torch.Tensor,
        grad_half_exp_neg_x: torch.Tensor,
    ) -> torch.Tensor:
        half_exp_x, half_exp_neg_x = ctx.saved_tensors
        grad_x = grad_sinh * (half_exp_x + half_exp_neg_x)
        grad_x = grad_x + grad_half_exp_x * half_exp_x
        return grad_x - grad_half_exp_neg_x * half_exp_neg_x


class SinhRecompute(torch.autograd.Function):
    """sinh x saving only the input x; backward recomputes eˣ/2 + e⁻ˣ/2 from it.

    x is an input, so backward's torch ops are recorded under ``create_graph=True``: no extra
    outputs and no extra saved tensors, at the price of two exponentials more per backward.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SinhRecompute", "x", x)
        ctx.save_for_backward(x)
        return torch.exp(x - _LN_2) - torch.exp(-x - _LN_2)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * (torch.exp(x - _LN_2) + torch.exp(-x - _LN_2))


class SinhNativeOps(torch.autograd.Function):
    """sinh x by :func:`torch.sinh`, saving x; backward is grad_out · :func:`torch.cosh` (x).

    The same kernels as the native op, so the difference from :func:`torch.sinh` is what a
    custom Function itself costs.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SinhNativeOps", "x", x)
        ctx.save_for_backward(x)
        return torch.sinh(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * torch.cosh(x)


def sinh_tutorial(x: torch.Tensor) -> torch.Tensor:
    """sinh x computed by :class:`SinhTutorial`, dropping the intermediate outputs."""
    return SinhTutorial.apply(x)[0]


def sinh_out_of_place(x: torch.Tensor) -> torch.Tensor:
    """sinh x computed by :class:`SinhOutOfPlace`, dropping the intermediate outputs."""
    return SinhOutOfPlace.apply(x)[0]


def sinh_materialized(x: torch.Tensor) -> torch.Tensor:
    """sinh x computed by :class:`SinhMaterialized`, dropping the intermediate outputs."""
    return SinhMaterialized.apply(x)[0]
