r"""Case 3 of the tutorial: backward needs an *intermediate* result of forward.

:math:`\sinh x = \tfrac{1}{2}e^{x} - \tfrac{1}{2}e^{-x}` and its derivative
:math:`\cosh x = \tfrac{1}{2}e^{x} + \tfrac{1}{2}e^{-x}` share the two exponentials, so forward
computes them once and backward reuses them. (The tutorial saves :math:`e^{\pm x}` and halves
later, so its result overflows where :math:`e^x` does, about :math:`\ln 2` before
:math:`\sinh x` itself. Saving the halves moves the overflow to where :math:`\sinh x` leaves
the dtype's range: 710.47587 in float64, 89.41599 in float32, as :func:`torch.sinh` computes
one element. On a longer tensor :func:`torch.sinh`'s vectorised CPU kernel overflows earlier,
with :math:`e^x`: from 709.78272 and 88.72284.)

Forward runs in no-grad mode, so an intermediate has no ``grad_fn``: a backward built from it
computes the right first derivative but cannot be differentiated again. :class:`Sinh` makes the
intermediates extra outputs so autograd tracks them; :class:`SinhBad` shows what goes wrong
otherwise.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ._validation import check_real_tensor

_LN_2 = math.log(2.0)


class Sinh(torch.autograd.Function):
    """sinh x = eˣ/2 − e⁻ˣ/2, also returning the intermediates eˣ/2, e⁻ˣ/2 as outputs.

    Being outputs, the saved intermediates are tracked, so
    grad_x = grad_sinh · (eˣ/2 + e⁻ˣ/2) has a graph back to x. Backward also adds the
    gradients arriving at the extra outputs: none on the first backward, the second
    derivative on the second. Use sinh() for the value alone.
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        check_real_tensor("Sinh", "x", x)
        # Forward is not recorded, so exp_ may overwrite the fresh x - ln 2 in place: one
        # allocation per exponential instead of two ("What it costs" measures the gain).
        half_exp_x = (x - _LN_2).exp_()
        half_exp_neg_x = (-_LN_2 - x).exp_()
        # The intermediates are returned as outputs, so the saved tensors are tracked.
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)
        # Unused outputs then get None, not zeros: 0 * inf would turn an overflow into nan.
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
        grad_x = None
        if grad_sinh is not None:
            grad_x = grad_sinh * (half_exp_x + half_exp_neg_x)
        # None on the first backward, but the second backward sends gradients through here.
        # addcmul(a, b, c) is a + b·c in one differentiable op, without a temporary b·c.
        if grad_half_exp_x is not None:
            grad_x = _add_product(grad_x, grad_half_exp_x, half_exp_x, 1)
        if grad_half_exp_neg_x is not None:
            grad_x = _add_product(grad_x, grad_half_exp_neg_x, half_exp_neg_x, -1)
        return grad_x


def _add_product(
    total: torch.Tensor | None, a: torch.Tensor, b: torch.Tensor, sign: int
) -> torch.Tensor:
    """total + sign · a · b, or sign · a · b when there is no total yet."""
    if total is None:
        return a * b if sign > 0 else -(a * b)
    return torch.addcmul(total, a, b, value=sign)


def sinh(x: torch.Tensor) -> torch.Tensor:
    """sinh x computed by Sinh, dropping the intermediate outputs."""
    return Sinh.apply(x)[0]


class SinhBad(torch.autograd.Function):
    """BROKEN on purpose, do not copy: sinh x with its intermediates stashed on ctx.

    The intermediates were made in no-grad mode and are not outputs, so they have no
    history: grad_x is right, but its only path back to x goes through grad_out. Four
    outcomes, by what follows SinhBad in the loss:

    - a plain grad_out (``sinh(x).sum()``): the second derivative is an error;
    - after a smooth nonlinear op (``(SinhBad.apply(x) ** 2).sum()``): grad_out depends on
      x, and the result is silently wrong: the term through cosh x is lost, and d²/dx² of
      ½ sinh² x comes out as cosh² x instead of cosh 2x;
    - after a piecewise-linear op (``relu(SinhBad.apply(x)).sum()``, or a
      ``Linear -> ReLU -> Linear`` network): grad_out is ReLU's 0/1 step, whose derivative is
      zero, and the result is exactly 0 with no error, instead of [sinh x > 0] sinh x;
    - grad_out requires grad but does not depend on x (behind a linear layer): grad_x has no
      path back to x; ``grad`` alone raises, and beside other terms of the loss SinhBad's
      share of the second derivative is silently missing.

    Sinh is the fix.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SinhBad", "x", x)
        half_exp_x = torch.exp(x - _LN_2)
        half_exp_neg_x = torch.exp(-x - _LN_2)
        # The mistake: intermediates created in no-grad mode, kept outside autograd's view.
        ctx.half_exp_x = half_exp_x
        ctx.half_exp_neg_x = half_exp_neg_x
        return half_exp_x - half_exp_neg_x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        return grad_out * (ctx.half_exp_x + ctx.half_exp_neg_x)
