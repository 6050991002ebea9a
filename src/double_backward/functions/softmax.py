r"""Softmax over a dimension, three ways to make its backward differentiable.

Softmax is not elementwise: each output depends on every input along ``dim``. With
:math:`y = \operatorname{softmax}(x)` and :math:`\langle a, b\rangle` the sum over ``dim``, the
Jacobian is :math:`J = \operatorname{diag}(y) - y y^\top` (symmetric), so backward is

.. math:: \bar{x} = g(\bar{y}, y) = J^\top \bar{y} = y \odot (\bar{y} - \langle \bar{y}, y\rangle).

Backward needs only the output :math:`y`, which is saved: an output is tracked, so its own
derivative reaches :math:`x` through the Function again. :math:`g` is linear in
:math:`\bar{y}`; its vector-Jacobian product with a cotangent :math:`v` has two parts:

- with respect to :math:`\bar{y}`: :math:`J v = y \odot (v - \langle v, y\rangle)`, which is
  the forward-mode derivative (JVP) of softmax in the direction :math:`v`;
- with respect to :math:`y` (the mixed term):
  :math:`v \odot (\bar{y} - \langle \bar{y}, y\rangle) - \langle v, y\rangle\,\bar{y}`.

The three versions:

- :class:`Softmax`: backward written with differentiable torch ops (every order follows);
- :class:`SoftmaxHandWritten` with :class:`SoftmaxBackward`: backward is a Function of its own
  whose backward returns both parts by hand, as ``Cube`` and ``CubeBackward`` do;
- :class:`SoftmaxWithJvp` with :class:`SoftmaxWithJvpBackward`: the modern style with a
  ``jvp``, and the double backward's part with respect to :math:`\bar{y}` *is* that ``jvp``.
"""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


def _check_softmax_input(function_name: str, x: Any, dim: Any) -> None:
    check_real_tensor(function_name, "x", x)
    if not x.is_floating_point():
        raise TypeError(
            f"{function_name}: argument 'x' must be a floating-point tensor, got dtype "
            f"{x.dtype}. Convert it first, e.g. x.float()."
        )
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(
            f"{function_name}: argument 'dim' must be an int, got {type(dim).__name__}"
        )


def _inner(a: torch.Tensor, b: torch.Tensor, dim: int) -> torch.Tensor:
    """⟨a, b⟩ along ``dim``, kept as a size-1 dimension so it broadcasts back."""
    return (a * b).sum(dim, keepdim=True)


def softmax_vjp(grad_out: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    r"""Backward of softmax: :math:`y \odot (\bar{y} - \langle \bar{y}, y\rangle)`.

    Differentiable torch ops only, so autograd records it under ``create_graph=True``.
    """
    return y * (grad_out - _inner(grad_out, y, dim))


def softmax_jvp(tangent: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    r"""Forward-mode derivative of softmax: :math:`J\dot{x} = y \odot (\dot{x} - \langle \dot{x},
    y\rangle)`.

    The same formula as :func:`softmax_vjp` because softmax's Jacobian is symmetric; for an op
    whose Jacobian is not (log-softmax, LayerNorm with a weight) the two differ, and the double
    backward needs this one.
    """
    return y * (tangent - _inner(tangent, y, dim))


def softmax_backward_mixed(
    v: torch.Tensor, grad_out: torch.Tensor, y: torch.Tensor, dim: int
) -> torch.Tensor:
    r"""The mixed term, :math:`\partial \langle v, g(\bar{y}, y)\rangle / \partial y
    = v \odot (\bar{y} - \langle \bar{y}, y\rangle) - \langle v, y\rangle\,\bar{y}`."""
    return v * (grad_out - _inner(grad_out, y, dim)) - _inner(v, y, dim) * grad_out


class Softmax(torch.autograd.Function):
    r"""softmax(x) along ``dim``, saving the output y; backward is :func:`softmax_vjp`.

    y is an output, so it is tracked: under ``create_graph=True`` the backward
    :math:`y \odot (\bar{y} - \langle \bar{y}, y\rangle)` is recorded as torch ops on
    :math:`\bar{y}` and :math:`y`, and its derivative with respect to y flows back to x through
    this Function's backward again. Every order works.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int) -> torch.Tensor:
        _check_softmax_input("Softmax", x, dim)
        y = torch.softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return softmax_vjp(grad_out, y, ctx.dim), None


def softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """softmax(x) along ``dim`` by :class:`Softmax` (as :func:`torch.softmax`)."""
    return Softmax.apply(x, dim)


class SoftmaxHandWritten(torch.autograd.Function):
    """softmax(x) along ``dim``, saving the output y; backward is :class:`SoftmaxBackward`.

    As ``Cube`` calls ``CubeBackward``: the backward is one opaque Function (a fused kernel in
    real code), which autograd records as one node, and whose own backward supplies the second
    derivative.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, dim: int) -> torch.Tensor:
        _check_softmax_input("SoftmaxHandWritten", x, dim)
        y = torch.softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return SoftmaxBackward.apply(grad_out, y, ctx.dim), None


class SoftmaxBackward(torch.autograd.Function):
    r"""g(ȳ, y) = y ⊙ (ȳ − ⟨ȳ, y⟩); its derivatives written by hand.

    Saves both inputs, ȳ and y. Backward, for a cotangent v, returns
    :math:`\partial/\partial\bar{y} = y \odot (v - \langle v, y\rangle)` and the mixed term
    :math:`\partial/\partial y = v \odot (\bar{y} - \langle \bar{y}, y\rangle) - \langle v,
    y\rangle\,\bar{y}`, torch ops on the saved (tracked) inputs: so the third and higher
    derivatives work too. Each is computed only when that input requires grad.
    """

    @staticmethod
    def forward(
        ctx: Any, grad_out: torch.Tensor, y: torch.Tensor, dim: int
    ) -> torch.Tensor:
        check_real_tensor("SoftmaxBackward", "grad_out", grad_out)
        check_real_tensor("SoftmaxBackward", "y", y)
        ctx.save_for_backward(grad_out, y)
        ctx.dim = dim
        return softmax_vjp(grad_out, y, dim)

    @staticmethod
    def backward(
        ctx: Any, v: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        grad_out, y = ctx.saved_tensors
        needs_grad_out, needs_y, _ = ctx.needs_input_grad
        dim = ctx.dim
        grad_grad_out = y * (v - _inner(v, y, dim)) if needs_grad_out else None
        grad_y = (
            v * (grad_out - _inner(grad_out, y, dim)) - _inner(v, y, dim) * grad_out
            if needs_y
            else None
        )
        return grad_grad_out, grad_y, None


def softmax_hand_written(x: torch.Tensor, dim: int) -> torch.Tensor:
    """softmax(x) along ``dim`` by :class:`SoftmaxHandWritten`."""
    return SoftmaxHandWritten.apply(x, dim)


class SoftmaxWithJvp(torch.autograd.Function):
    r"""softmax(x) along ``dim`` in the ``setup_context`` style, with a ``jvp``.

    Saves the output y, for backward and for ``jvp``. The ``jvp`` is :func:`softmax_jvp`;
    backward is :class:`SoftmaxWithJvpBackward`, whose own backward reuses that same
    :func:`softmax_jvp` for its part with respect to :math:`\bar{y}`: the VJP of a backward
    with respect to its incoming gradient is the forward's JVP. Forward mode and
    :mod:`torch.func` work as well.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: torch.Tensor, dim: int) -> torch.Tensor:
        _check_softmax_input("SoftmaxWithJvp", x, dim)
        return torch.softmax(x, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, int], output: torch.Tensor):
        ctx.dim = inputs[1]
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return SoftmaxWithJvpBackward.apply(grad_out, y, ctx.dim), None

    @staticmethod
    def jvp(ctx: Any, x_tangent: torch.Tensor, dim_tangent: None) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return softmax_jvp(x_tangent, y, ctx.dim)


class SoftmaxWithJvpBackward(torch.autograd.Function):
    r"""g(ȳ, y) = y ⊙ (ȳ − ⟨ȳ, y⟩), whose backward reuses :func:`softmax_jvp`.

    Saves ȳ and y (both tracked inputs). Backward: the part with respect to ȳ is
    ``softmax_jvp(v, y)``, the part with respect to y is :func:`softmax_backward_mixed`;
    both are torch ops, so every higher order works. Its own ``jvp``,
    :math:`\dot{g} = g(\dot{\bar{y}}, y) + \dot{y} \odot (\bar{y} - \langle\bar{y}, y\rangle)
    - y\,\langle \bar{y}, \dot{y}\rangle`, makes forward-over-reverse Hessians work.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_out: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
        return softmax_vjp(grad_out, y, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        grad_out, y, ctx.dim = inputs
        ctx.save_for_backward(grad_out, y)
        ctx.save_for_forward(grad_out, y)

    @staticmethod
    def backward(
        ctx: Any, v: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        grad_out, y = ctx.saved_tensors
        needs_grad_out, needs_y, _ = ctx.needs_input_grad
        # The part with respect to grad_out is the forward-mode derivative of softmax.
        grad_grad_out = softmax_jvp(v, y, ctx.dim) if needs_grad_out else None
        grad_y = softmax_backward_mixed(v, grad_out, y, ctx.dim) if needs_y else None
        return grad_grad_out, grad_y, None

    @staticmethod
    def jvp(
        ctx: Any,
        grad_out_tangent: torch.Tensor,
        y_tangent: torch.Tensor,
        dim_tangent: None,
    ) -> torch.Tensor:
        grad_out, y = ctx.saved_tensors
        dim = ctx.dim
        return (
            softmax_vjp(grad_out_tangent, y, dim)
            + y_tangent * (grad_out - _inner(grad_out, y, dim))
            - y * _inner(grad_out, y_tangent, dim)
        )


def softmax_with_jvp(x: torch.Tensor, dim: int) -> torch.Tensor:
    """softmax(x) along ``dim`` by :class:`SoftmaxWithJvp`."""
    return SoftmaxWithJvp.apply(x, dim)
