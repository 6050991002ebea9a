"""BROKEN on purpose, do not copy: the wrong patterns of the failure gallery.

Each Function below computes the right value and the right first derivative; each gets the
second derivative wrong in its own way. How wrong depends on the incoming gradient: with a
plain one (``fn(x).sum()``) most raise, but after a smooth nonlinear op downstream (a loss, a
square) the incoming gradient depends on ``x`` and the same Function returns a wrong number
without an error; after a piecewise-linear one (ReLU, the most common layer) the incoming
gradient is a 0/1 step whose own derivative is zero, and the same Function returns exactly
zero, again without an error. :func:`second_derivative` takes the second derivative in each of
those ways;
the site runs it to show the symptoms, the tests pin each failure, and
:func:`double_backward.check` must name each problem. The fixes are in
``double_backward.functions.saving_intermediates`` and
``double_backward.functions.saving_inputs``.
(Two more failures reuse other modules: :class:`double_backward.SinhBad`, which stashes
intermediates on ``ctx``, and the old-style Functions under :mod:`torch.func`.)
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.autograd.function import once_differentiable

from . import layer_norm
from ._validation import check_real_tensor
from .untracked_backward import cube_backward_numpy

_LN_2 = math.log(2.0)


def _half_exponentials(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.exp(x - _LN_2), torch.exp(-x - _LN_2)


class SinhSavesIntermediate(torch.autograd.Function):
    """BROKEN: saves intermediates with save_for_backward, but they are not outputs.

    save_for_backward accepts them, yet they were made in no-grad mode and have no history,
    so grad_x reaches x only through grad_out, exactly as when they are stashed on ctx: an
    error with a plain grad_out, a wrong number (cosh² x for d²/dx² of ½ sinh² x, instead of
    cosh 2x) when grad_out depends on x smoothly, and exactly zero after a ReLU.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SinhSavesIntermediate", "x", x)
        half_exp_x, half_exp_neg_x = _half_exponentials(x)
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)  # the mistake
        return half_exp_x - half_exp_neg_x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        half_exp_x, half_exp_neg_x = ctx.saved_tensors
        return grad_out * (half_exp_x + half_exp_neg_x)


class SinhNonDifferentiableExtras(torch.autograd.Function):
    """BROKEN: returns the intermediates as outputs but marks them non-differentiable.

    Marked non-differentiable, the saved outputs come back from ctx.saved_tensors without
    history: first-order gradcheck passes, gradgradcheck fails. As with SinhSavesIntermediate,
    the second derivative is an error with a plain grad_out and wrong when grad_out depends
    on x.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor):
        check_real_tensor("SinhNonDifferentiableExtras", "x", x)
        half_exp_x, half_exp_neg_x = _half_exponentials(x)
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)
        ctx.mark_non_differentiable(half_exp_x, half_exp_neg_x)  # the mistake
        return half_exp_x - half_exp_neg_x, half_exp_x, half_exp_neg_x

    @staticmethod
    def backward(ctx: Any, grad_sinh, grad_half_exp_x, grad_half_exp_neg_x):
        half_exp_x, half_exp_neg_x = ctx.saved_tensors
        return grad_sinh * (half_exp_x + half_exp_neg_x)


class SinhDropsExtraGrads(torch.autograd.Function):
    """BROKEN: returns the intermediates as outputs, but backward ignores their gradients.

    grad_x has a graph back to x, so nothing errors, but the second backward sends the
    second derivative through the extra outputs and backward drops it: d²y/dx² comes out
    as 0 instead of sinh x, and d²/dx² of ½ sinh² x as cosh² x instead of cosh 2x.
    Silently wrong.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor):
        check_real_tensor("SinhDropsExtraGrads", "x", x)
        half_exp_x, half_exp_neg_x = _half_exponentials(x)
        ctx.save_for_backward(half_exp_x, half_exp_neg_x)
        return half_exp_x - half_exp_neg_x, half_exp_x, half_exp_neg_x

    @staticmethod
    def backward(ctx: Any, grad_sinh, grad_half_exp_x, grad_half_exp_neg_x):
        half_exp_x, half_exp_neg_x = ctx.saved_tensors
        return grad_sinh * (
            half_exp_x + half_exp_neg_x
        )  # the mistake: extra grads dropped


def sinh_drops_extra_grads(x: torch.Tensor) -> torch.Tensor:
    """sinh x by :class:`SinhDropsExtraGrads` (first output only)."""
    return SinhDropsExtraGrads.apply(x)[0]


class SquareDetachesInBackward(torch.autograd.Function):
    """BROKEN: detaches the saved input inside backward.

    x.detach() cuts the path from grad_x back to x, except through grad_out: the second
    derivative is an error with a plain grad_out, and wrong when grad_out depends on x
    (4x² for d²/dx² of ½ x⁴, instead of 6x²).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SquareDetachesInBackward", "x", x)
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * 2 * x.detach()  # the mistake


class SquareOnceDifferentiable(torch.autograd.Function):
    """A backward that declares itself first-order only: loud in one use, silent in others.

    @once_differentiable runs backward in no-grad mode, so its result has no graph back to
    x. When an incoming gradient requires grad, the result is attached instead to a node
    that raises "trying to differentiate twice": a second ``.backward()`` runs that node
    and fails loudly. ``torch.autograd.grad(..., x)`` never runs it (the node does not
    lead to x): alone, the second derivative is then an error; added to other terms of
    the loss, the Function's term is silently missing. For
    ``SquareOnceDifferentiable.apply(x).sum() + (x ** 3).sum()`` the second derivative
    comes back as 6x instead of 2 + 6x, by ``grad`` and by ``.backward()`` alike.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SquareOnceDifferentiable", "x", x)
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * 2 * x


class CubeBackwardNumpyUnderVmap(torch.autograd.Function):
    """BROKEN under vmap: a NumPy forward with generate_vmap_rule = True.

    generate_vmap_rule runs forward on vmap's batched tensors, which NumPy cannot read. A
    NumPy forward needs a hand-written vmap staticmethod, as in
    :class:`double_backward.functions.setup_context_style.CubeBackward`.
    """

    generate_vmap_rule = True  # the mistake

    @staticmethod
    def forward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return cube_backward_numpy(grad_out, x)

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any
    ) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad_out, x = ctx.saved_tensors
        return grad_g * 3 * x**2, grad_g * grad_out * 6 * x


class SquareWithoutJvp(torch.autograd.Function):
    """Incomplete for forward mode: setup_context style, but no jvp staticmethod.

    Reverse mode (backward, grad, jacrev, vmap) works; forward mode (jvp, jacfwd, and
    hessian, which is jacfwd over jacrev) raises, as a Function must say how to push a
    tangent forward. :class:`double_backward.functions.setup_context_style.Square` adds the jvp.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x**2

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor
    ) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out * 2 * x


class CubeBackwardWithoutJvp(torch.autograd.Function):
    """g = grad_out · 3x², the backward of :class:`CubeJvpOnOuterOnly`, with no jvp."""

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return grad_out * 3 * x**2

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any
    ) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        grad_out, x = ctx.saved_tensors
        return grad_g * 3 * x**2, grad_g * grad_out * 6 * x


class CubeJvpOnOuterOnly(torch.autograd.Function):
    """Incomplete for hessian: a jvp on the outer Function, none on the one its backward calls.

    ``hessian`` is forward mode over reverse mode: the tangent is pushed through backward
    too, so through :class:`CubeBackwardWithoutJvp`, which cannot take it.
    :class:`double_backward.functions.setup_context_style.Cube` gives both Functions a jvp.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("CubeJvpOnOuterOnly", "x", x)
        return x**3

    @staticmethod
    def setup_context(
        ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor
    ) -> None:
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return CubeBackwardWithoutJvp.apply(grad_out, x)  # the mistake: no jvp there

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 3 * x**2 * x_tangent


# -- how readers meet the failures --------------------------------------------------------
GRAD_OUTS = ("ones", "ones requiring grad", "depends on x", "after relu")
"""The incoming gradients :func:`second_derivative` can use, as readers meet them."""


def second_derivative(
    fn: Any, x: torch.Tensor, grad_out: str, *, no_path_as_zero: bool = True
) -> torch.Tensor | None:
    r"""The second derivative of ``fn`` at ``x``, elementwise, with a given incoming gradient.

    ``fn`` is elementwise; a Function returning a tuple counts by its first output. The
    first derivative is taken with ``create_graph=True``, then the sum of it is
    differentiated with respect to ``x``:

    - ``"ones"``: the incoming gradient of ``fn(x).sum()``, plain ones: gives
      :math:`f''(x)`;
    - ``"ones requiring grad"``: ones that require grad, as ``gradgradcheck`` and some
      gradient penalties pass: gives :math:`f''(x)` too;
    - ``"depends on x"``: the gradient of :math:`\tfrac12 \sum f(x)^2`, whose incoming
      gradient :math:`f(x)` depends on ``x``, as after a smooth nonlinear op downstream:
      gives :math:`f'(x)^2 + f(x)\,f''(x)`;
    - ``"after relu"``: the gradient of :math:`\sum \mathrm{relu}(f(x))`, whose incoming
      gradient :math:`[f(x) > 0]` depends on ``x`` through a step with derivative zero, as
      after any piecewise-linear op downstream (ReLU, max-pooling, a clamp): gives
      :math:`[f(x) > 0]\,f''(x)`. A Function whose gradient reaches ``x`` only through its
      incoming gradient gets exactly zero here, with no error.

    A gradient with no path back to ``x`` has no second derivative to give. Asked alone,
    ``torch.autograd.grad`` raises ("appears to not have been used in the graph"); summed
    with other terms of a loss that do reach ``x``, the Function's share silently counts as
    zero. This returns that zero, or ``None`` with ``no_path_as_zero=False``, so a caller
    can tell "no path" from "a path that gives zero". Other errors autograd raises propagate.
    """
    if grad_out not in GRAD_OUTS:
        raise ValueError(f"grad_out must be one of {GRAD_OUTS}, got {grad_out!r}")
    x = x.detach().requires_grad_()
    y = fn(x)
    y = y[0] if isinstance(y, tuple) else y
    if grad_out == "depends on x":
        (grad_x,) = torch.autograd.grad((y**2).sum() / 2, x, create_graph=True)
    elif grad_out == "after relu":
        (grad_x,) = torch.autograd.grad(torch.relu(y).sum(), x, create_graph=True)
    else:
        incoming = torch.ones_like(y, requires_grad=grad_out == "ones requiring grad")
        (grad_x,) = torch.autograd.grad(y, x, incoming, create_graph=True)
    (second,) = torch.autograd.grad(
        grad_x.sum(), x, allow_unused=True, materialize_grads=no_path_as_zero
    )
    return second


# -- custom operators ------------------------------------------------------------------------
@torch.library.custom_op(
    "double_backward::cube_backward_without_autograd", mutates_args=()
)
def cube_backward_without_autograd(
    grad_out: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """BROKEN for double backward: grad_out · 3x² by NumPy, an operator with no autograd.

    Registered with custom_op but never with register_autograd. Called from another
    operator's backward, it gives the right first derivative, and the second backward
    raises: autograd records the call, but has no formula to differentiate it with.
    """
    return cube_backward_numpy(grad_out, x)


cube_backward_without_autograd.register_fake(
    lambda grad_out, x: torch.empty_like(x, dtype=torch.result_type(grad_out, x))
)


@torch.library.custom_op(
    "double_backward::cube_with_untracked_backward", mutates_args=()
)
def cube_with_untracked_backward(x: torch.Tensor) -> torch.Tensor:
    """BROKEN at second order: x³ whose backward calls :func:`cube_backward_without_autograd`.

    The fix, :func:`double_backward.functions.custom_ops.cube`, registers autograd for its
    backward operator too.
    """
    check_real_tensor("cube_with_untracked_backward", "x", x)
    return x.detach() ** 3


cube_with_untracked_backward.register_fake(lambda x: torch.empty_like(x))


def _save_x(ctx: Any, inputs: tuple[torch.Tensor], output: Any) -> None:
    ctx.save_for_backward(*inputs)


def _untracked_backward_rule(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    return cube_backward_without_autograd(
        grad_out, x
    )  # the mistake: no autograd behind it


cube_with_untracked_backward.register_autograd(
    _untracked_backward_rule, setup_context=_save_x
)


class LayerNormSavesStatistics(torch.autograd.Function):
    r"""BROKEN: LayerNorm saving the mean and 1/std from forward, as fused kernels do.

    Modelled on apex's ``FusedLayerNormAffineFunction`` (which saves ``input, weight, bias,
    mean, invvar``). The statistics :math:`\mu, r` were made in untracked forward and are not
    outputs, so in the second backward they are constants. x is saved too and tracked, so
    nothing errors and the first derivative is right, but the Hessian misses every term through
    :math:`\partial\mu/\partial x` and :math:`\partial r/\partial x`: silently wrong. The fixes
    are :class:`double_backward.functions.layer_norm.LayerNorm` (recompute them) and
    :class:`double_backward.functions.layer_norm.LayerNormWithStatistics` (return them).
    """

    @staticmethod
    def forward(ctx: Any, x, normalized_shape, weight=None, bias=None, eps=1e-5):
        dims = layer_norm.normalized_dims(
            "LayerNormSavesStatistics", x, normalized_shape, weight, bias, eps
        )
        mean, rstd = layer_norm.statistics(x, dims, eps)
        # The mistake: mean and rstd are saved, but were made untracked and are not outputs.
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.dims = dims
        y = (x - mean) * rstd
        y = y if weight is None else y * weight
        return y if bias is None else y + bias

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        needs_x, _, needs_weight, needs_bias, _ = ctx.needs_input_grad
        grad_x, grad_weight, grad_bias = layer_norm.layer_norm_backward(
            grad_out, (x - mean) * rstd, rstd, weight, ctx.dims,
            (needs_x, needs_weight, needs_bias),
        )  # fmt: skip
        return grad_x, None, grad_weight, grad_bias, None


def layer_norm_saves_statistics(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm by :class:`LayerNormSavesStatistics` (broken at second order)."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return LayerNormSavesStatistics.apply(x, tuple(normalized_shape), weight, bias, eps)
