r"""Case 4 of the tutorial the way PyTorch recommends since 2.4: two custom operators.

:func:`torch.library.custom_op` turns a Python function whose inside PyTorch cannot see (NumPy
here, standing in for SciPy or a C++/CUDA kernel) into an operator with a schema, like
``torch.ops.aten.mul``. Autograd, :mod:`torch.func`, ``torch.compile`` and ``torch.export``
treat it as one opaque call; what each needs is registered beside it:

- ``cube`` computes :math:`y = x^3` in NumPy. Its ``register_autograd`` backward is
  :math:`\bar{x} = 3x^2\,\bar{y}`, computed by calling the second operator, ``cube_backward``.
- ``cube_backward`` computes :math:`g = 3x^2\,\bar{y}` in NumPy too. Its own
  ``register_autograd`` backward returns :math:`\partial g/\partial \bar{y} \cdot \bar{g} =
  3x^2\,\bar{g}` and :math:`\partial g/\partial x \cdot \bar{g} = 6x\,\bar{y}\,\bar{g}` with
  torch operations, so second, third and higher derivatives of ``cube`` work.
- ``register_fake`` gives each operator's output shape and dtype without running NumPy, which
  is what ``torch.compile``, ``torch.export`` and :func:`torch.library.opcheck` trace with.
- ``register_vmap`` runs the elementwise NumPy code on the whole batch at once; without it
  :func:`torch.func.vmap` falls back to a slow loop and prints a performance warning.

What torch 2.13 does not give a custom operator: :func:`torch.func.grad`, ``jacrev`` and
``hessian`` refuse it (its autograd is an old-style Function inside), and forward mode
(``jvp``, ``jacfwd``) runs it without a tangent rule and returns zero tangents, silently.

The operators live in the ``double_backward`` namespace: ``torch.ops.double_backward.cube``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._validation import check_real_tensor
from .untracked_backward import _to_numpy, cube_backward_numpy

NAMESPACE = "double_backward"


def _cube_numpy(x: torch.Tensor) -> torch.Tensor:
    """x³ computed by NumPy on a detached copy, returned as a new tensor like x."""
    with np.errstate(
        over="ignore", invalid="ignore"
    ):  # overflow gives inf, as in torch
        result = _to_numpy(x) ** 3
    return torch.from_numpy(np.asarray(result)).to(device=x.device, dtype=x.dtype)


# -- cube -------------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::cube", mutates_args=())
def cube(x: torch.Tensor) -> torch.Tensor:
    """y = x³, computed by NumPy; differentiable to any order through ``cube_backward``."""
    check_real_tensor("cube", "x", x)
    return _cube_numpy(x)


@cube.register_fake
def _cube_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def _cube_setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: Any) -> None:
    (x,) = inputs
    ctx.save_for_backward(x)  # an input: it keeps its history for the next order


def _cube_backward_rule(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
    (x,) = ctx.saved_tensors
    # A call to an operator with its own autograd: recorded when create_graph=True.
    return cube_backward(grad_out, x)


cube.register_autograd(_cube_backward_rule, setup_context=_cube_setup_context)


def _batch_first(value: torch.Tensor, dim: int | None, batch_size: int) -> torch.Tensor:
    """``value`` with its vmap batch dimension moved first (or added by broadcasting)."""
    if dim is None:
        return value.expand(batch_size, *value.shape)
    return value.movedim(dim, 0)


@cube.register_vmap
def _cube_vmap(info: Any, in_dims: tuple[int | None], x: torch.Tensor):
    (x_dim,) = in_dims
    return cube(_batch_first(x, x_dim, info.batch_size)), 0


# -- cube_backward ------------------------------------------------------------------------
@torch.library.custom_op(f"{NAMESPACE}::cube_backward", mutates_args=())
def cube_backward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """g = grad_out · 3x², computed by NumPy; its backward is written with torch operations."""
    check_real_tensor("cube_backward", "grad_out", grad_out)
    check_real_tensor("cube_backward", "x", x)
    return cube_backward_numpy(grad_out, x)


def _cube_backward_result(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """An empty tensor of the broadcast shape and result dtype, as NumPy's result has."""
    shape = torch.broadcast_shapes(grad_out.shape, x.shape)
    return x.new_empty(shape, dtype=torch.result_type(grad_out, x))


cube_backward.register_fake(_cube_backward_result)


def _cube_backward_setup_context(
    ctx: Any, inputs: tuple[torch.Tensor, torch.Tensor], output: Any
) -> None:
    ctx.save_for_backward(*inputs)


def _cube_backward_backward_rule(
    ctx: Any, grad_g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    grad_out, x = ctx.saved_tensors
    return grad_g * 3 * x**2, grad_g * grad_out * 6 * x


cube_backward.register_autograd(
    _cube_backward_backward_rule, setup_context=_cube_backward_setup_context
)


@cube_backward.register_vmap
def _cube_backward_vmap(
    info: Any,
    in_dims: tuple[int | None, int | None],
    grad_out: torch.Tensor,
    x: torch.Tensor,
):
    grad_out_dim, x_dim = in_dims
    grad_out = _batch_first(grad_out, grad_out_dim, info.batch_size)
    return cube_backward(grad_out, _batch_first(x, x_dim, info.batch_size)), 0
