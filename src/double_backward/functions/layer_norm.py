r"""LayerNorm with weight and bias, whose backward can be differentiated to every order.

Over the last dimensions, those of ``normalized_shape`` (:math:`N` elements per row), with
:math:`\mu` the row mean, :math:`r = (\sigma^2 + \epsilon)^{-1/2}` the reciprocal standard
deviation, :math:`\hat{x} = (x - \mu)\,r` and :math:`w, b` broadcast over the leading
dimensions:

.. math:: y = \hat{x} \odot w + b.

Backward, with :math:`\hat{g} = \bar{y} \odot w` and :math:`\overline{(\cdot)}` the mean over
the row:

.. math::

   \bar{x} = r\,(\hat{g} - \overline{\hat{g}} - \hat{x}\,\overline{\hat{g}\odot\hat{x}}),
   \qquad \bar{w} = \textstyle\sum_{\text{rows}} \bar{y} \odot \hat{x},
   \qquad \bar{b} = \textstyle\sum_{\text{rows}} \bar{y}.

The two terms subtracted in :math:`\bar{x}` are what :math:`\mu` and :math:`r` contribute: they
depend on :math:`x` (:math:`\partial\mu/\partial x_i = 1/N`,
:math:`\partial r/\partial x_i = -r^3 (x_i - \mu)/N`). The second derivative needs them to
depend on :math:`x` in the graph too. Fused kernels save :math:`\mu` and :math:`r` from forward,
which runs untracked: then the Hessian loses those terms, silently
(:class:`~double_backward.functions.failures.LayerNormSavesStatistics`). Two fixes:

- :class:`LayerNorm` saves only the inputs and recomputes :math:`\mu` and :math:`r` in backward
  with differentiable ops;
- :class:`LayerNormWithStatistics` returns :math:`\mu` and :math:`r` as extra outputs, as
  ``Sinh`` does its exponentials, and adds the gradients they receive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ._validation import check_real_tensor


def normalized_dims(
    function_name: str,
    x: Any,
    normalized_shape: Any,
    weight: Any,
    bias: Any,
    eps: Any,
) -> tuple[int, ...]:
    """Check the arguments as :func:`torch.nn.functional.layer_norm` takes them.

    Returns the dimensions normalized over, counted from the end (``(-2, -1)``), or raises
    ``TypeError`` / ``ValueError`` saying what was expected.
    """
    check_real_tensor(function_name, "x", x)
    if not x.is_floating_point():
        raise TypeError(
            f"{function_name}: argument 'x' must be a floating-point tensor, got {x.dtype}"
        )
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    if not isinstance(normalized_shape, Sequence) or not all(
        isinstance(n, int) and not isinstance(n, bool) for n in normalized_shape
    ):
        raise TypeError(
            f"{function_name}: 'normalized_shape' must be an int or a sequence of ints, "
            f"got {normalized_shape!r}"
        )
    shape = tuple(normalized_shape)
    if not shape or tuple(x.shape[-len(shape) :]) != shape or x.dim() < len(shape):
        raise ValueError(
            f"{function_name}: 'normalized_shape' {list(shape)} must be non-empty and equal "
            f"the last dimensions of x, whose shape is {list(x.shape)}"
        )
    for name, value in (("weight", weight), ("bias", bias)):
        if value is None:
            continue
        check_real_tensor(function_name, name, value)
        if tuple(value.shape) != shape:
            raise ValueError(
                f"{function_name}: '{name}' must have shape normalized_shape = "
                f"{list(shape)}, got {list(value.shape)}"
            )
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"{function_name}: 'eps' must be a number >= 0, got {eps!r}")
    return tuple(range(-len(shape), 0))


def statistics(
    x: torch.Tensor, dims: tuple[int, ...], eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Row mean :math:`\mu` and :math:`r = (\sigma^2 + \epsilon)^{-1/2}`, kept as size-1 dims.

    Torch ops: recorded when called in a backward under ``create_graph=True``.
    """
    mean = x.mean(dims, keepdim=True)
    rstd = torch.rsqrt(x.var(dims, correction=0, keepdim=True) + eps)
    return mean, rstd


def layer_norm_backward(
    grad_out: torch.Tensor,
    x_hat: torch.Tensor,
    rstd: torch.Tensor,
    weight: torch.Tensor | None,
    dims: tuple[int, ...],
    needs: tuple[bool, bool, bool],
) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    r""":math:`(\bar{x}, \bar{w}, \bar{b})` from :math:`\hat{x}` and :math:`r`, each if needed.

    Differentiable torch ops: a second backward differentiates through them, and through
    :math:`\hat{x}` and :math:`r` to :math:`x` when those were computed from :math:`x` in a
    tracked way.
    """
    needs_x, needs_weight, needs_bias = needs
    # The leading dims, over which w and b broadcast.
    rows = tuple(range(grad_out.dim() - len(dims)))
    grad_x = grad_weight = grad_bias = None
    if needs_x:
        g_hat = grad_out if weight is None else grad_out * weight
        grad_x = rstd * (
            g_hat
            - g_hat.mean(dims, keepdim=True)
            - x_hat * (g_hat * x_hat).mean(dims, keepdim=True)
        )
    if needs_weight:
        grad_weight = (grad_out * x_hat).sum(rows) if rows else grad_out * x_hat
    if needs_bias:
        grad_bias = grad_out.sum(rows) if rows else grad_out
    return grad_x, grad_weight, grad_bias


def _affine(
    x_hat: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None
) -> torch.Tensor:
    y = x_hat if weight is None else x_hat * weight
    return y if bias is None else y + bias


class LayerNorm(torch.autograd.Function):
    r"""LayerNorm saving only its inputs x and w; backward recomputes :math:`\mu` and :math:`r`.

    Backward calls :func:`statistics` on the saved x, so under ``create_graph=True``
    :math:`\mu`, :math:`r` and :math:`\hat{x}` are recorded as functions of x, and
    :func:`layer_norm_backward` builds :math:`\bar{x}, \bar{w}, \bar{b}` from them with torch
    ops: the second backward sees every path to x, w and ȳ, and so does every later one. The
    price: one mean and one variance more per backward, and no extra tensor kept.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        normalized_shape: Sequence[int],
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        eps: float = 1e-5,
    ) -> torch.Tensor:
        dims = normalized_dims("LayerNorm", x, normalized_shape, weight, bias, eps)
        mean, rstd = statistics(x, dims, eps)
        ctx.save_for_backward(x, weight)
        ctx.dims, ctx.eps = dims, eps
        return _affine((x - mean) * rstd, weight, bias)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor):
        x, weight = ctx.saved_tensors
        needs_x, _, needs_weight, needs_bias, _ = ctx.needs_input_grad
        # Recomputed here, from the tracked x: the graph knows mu and r depend on x.
        mean, rstd = statistics(x, ctx.dims, ctx.eps)
        grads = layer_norm_backward(
            grad_out, (x - mean) * rstd, rstd, weight, ctx.dims,
            (needs_x, needs_weight, needs_bias),
        )  # fmt: skip
        grad_x, grad_weight, grad_bias = grads
        return grad_x, None, grad_weight, grad_bias, None


def layer_norm(
    x: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm by :class:`LayerNorm`, called as :func:`torch.nn.functional.layer_norm`."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return LayerNorm.apply(x, tuple(normalized_shape), weight, bias, eps)


class LayerNormWithStatistics(torch.autograd.Function):
    r"""LayerNorm returning :math:`\mu` and :math:`r` as extra outputs, and saving them.

    Being outputs, the saved :math:`\mu` and :math:`r` are tracked: when the second backward
    differentiates :math:`\bar{x}` with respect to them, their gradients
    :math:`\bar{\mu}, \bar{r}` come back into this backward, which adds
    :math:`\bar{\mu}/N - \bar{r}\,r^3 (x - \mu)/N` to :math:`\bar{x}`. Nothing is recomputed;
    the two statistics (one value per row) are kept. Use :func:`layer_norm_with_statistics`
    for the value alone.
    """

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        normalized_shape: Sequence[int],
        weight: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        eps: float = 1e-5,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dims = normalized_dims(
            "LayerNormWithStatistics", x, normalized_shape, weight, bias, eps
        )
        mean, rstd = statistics(x, dims, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.dims = dims
        # Unused statistics then get None, not tensors of zeros.
        ctx.set_materialize_grads(False)
        return _affine((x - mean) * rstd, weight, bias), mean, rstd

    @staticmethod
    def backward(
        ctx: Any,
        grad_out: torch.Tensor | None,
        grad_mean: torch.Tensor | None,
        grad_rstd: torch.Tensor | None,
    ):
        x, weight, mean, rstd = ctx.saved_tensors
        needs_x, _, needs_weight, needs_bias, _ = ctx.needs_input_grad
        grad_x = grad_weight = grad_bias = None
        if grad_out is not None:
            grad_x, grad_weight, grad_bias = layer_norm_backward(
                grad_out, (x - mean) * rstd, rstd, weight, ctx.dims,
                (needs_x, needs_weight, needs_bias),
            )  # fmt: skip
        # None on the first backward; the second backward sends gradients through here.
        if needs_x and (grad_mean is not None or grad_rstd is not None):
            count = math.prod(x.shape[d] for d in ctx.dims)  # N, elements per row
            from_stats = torch.zeros_like(x)
            if grad_mean is not None:
                from_stats = from_stats + grad_mean / count
            if grad_rstd is not None:
                from_stats = from_stats - grad_rstd * rstd**3 * (x - mean) / count
            grad_x = from_stats if grad_x is None else grad_x + from_stats
        return grad_x, None, grad_weight, grad_bias, None


def layer_norm_with_statistics(
    x: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm by :class:`LayerNormWithStatistics`, dropping the statistics outputs."""
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    y, _, _ = LayerNormWithStatistics.apply(
        x, tuple(normalized_shape), weight, bias, eps
    )
    return y
