"""A corpus of custom Functions modelled on what real projects write, for the checker's tests.

Each Function is this project's own code. The comment above it names the pattern and the
project whose Functions it models. ``CASES`` lists how each is called, the native-torch
reference that computes the same outputs (``None`` where the case has nothing to compare), and
the problems the checker must name (an empty set: none). Whether double backward really works
is established in ``test_checker_corpus.py`` by comparing with the reference, never by the
checker.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from double_backward import SinhBad, sinh
from double_backward.functions import failures

# -- linear and piecewise-linear: the second derivative is zero ------------------------


# A ReLU as in PyTorch's own "defining new autograd functions" example: grad * (x > 0).
class ReLUMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


# The same ReLU saving its float mask, an intermediate without history (torchvision/timm
# style memory savers): suspicious, but the second derivative is zero, so nothing breaks.
class ReLUSavedMask(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mask = (x > 0).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask


# A constant scale (timm / fairseq "scale gradient" helpers): linear, nothing saved.
class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


# A view returned by forward (transformers / pytorch3d reshape helpers): backward reshapes.
class Flatten(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape  # a torch.Size on ctx, not a tensor: fine
        return x.view(-1)

    @staticmethod
    def backward(ctx, grad):
        return grad.view(ctx.shape)


# Constant padding with a tuple argument and an unused None (mmcv / kornia padding ops).
class ConstantPad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, pad, unused):
        ctx.pad = pad
        return F.pad(x, pad)

    @staticmethod
    def backward(ctx, grad):
        left, right = ctx.pad
        return grad[..., left : grad.shape[-1] - right], None, None


# Sum over a dimension given as an int (gpytorch / pyro reductions with a dim argument).
class SumDim(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        ctx.dim, ctx.size = dim, x.shape[dim]
        return x.sum(dim)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.unsqueeze(ctx.dim)
        shape = list(grad.shape)
        shape[ctx.dim] = ctx.size
        return grad.expand(shape), None


# Sort returning integer indices marked non-differentiable and saved (autograd_function_db's
# NumpySort, pytorch3d's knn idx): integers never need history.
class SortValues(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        values, indices = torch.sort(x, dim=-1)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        return torch.zeros_like(grad_values).scatter(-1, indices, grad_values)


# Gather with an integer index input (pytorch3d / mmcv gather-scatter ops).
class Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, index):
        ctx.save_for_backward(index)
        ctx.x_shape = x.shape
        return x.gather(1, index)

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        return grad.new_zeros(ctx.x_shape).scatter_add(1, index, grad), None


# In-place ReLU with mark_dirty (autograd_function_db's mark_dirty cases, apex inplace ops).
class InplaceReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.clamp_(min=0)
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (out > 0)


# -- bilinear and several inputs of different shapes ------------------------------------


# A matmul saving both operands (apex fused dense, gpytorch matmul).
class MatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad @ b.transpose(-1, -2), a.transpose(-1, -2) @ grad


# A broadcasting product of a (3, 4) and a (4,) input (kornia / mmcv elementwise scales).
class BroadcastMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        return grad * b, (grad * a).sum(0)


# A bilinear form x1ᵀ W x2 with three inputs of three shapes (torch.nn.Bilinear-like layers).
class BilinearForm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x1, x2, weight):
        ctx.save_for_backward(x1, x2, weight)
        return torch.einsum("bi,ij,bj->b", x1, weight, x2)

    @staticmethod
    def backward(ctx, grad):
        x1, x2, weight = ctx.saved_tensors
        g = grad[:, None]
        return g * (x2 @ weight.T), g * (x1 @ weight), (grad[:, None] * x1).T @ x2


# A linear layer with an optional bias passed as None (apex / transformers fused linear).
class Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        out = x @ weight.T
        return out if bias is None else out + bias

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight, grad.T @ x, None


# -- smooth activations and losses ---------------------------------------------------------


# Swish saving its input, derivative recomputed with torch ops (timm's activations_me).
class Swish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * (s * (1 + x * (1 - s)))


# Mish saving its input (timm's MishAutoFn).
class Mish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.tanh(F.softplus(x))

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s, t = torch.sigmoid(x), torch.tanh(F.softplus(x))
        return grad * (t + x * s * (1 - t * t))


# Hard-swish, piecewise with a curved middle (timm's HardSwishAutoFn).
class HardSwish(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * F.relu6(x + 3) / 6

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        middle = (2 * x + 3) / 6
        slope = torch.where(
            x < -3, torch.zeros_like(x), torch.where(x > 3, 1 + 0 * x, middle)
        )
        return grad * slope


# Sigmoid saving its output (the classic "save the output" Function).
class Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.sigmoid(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * out * (1 - out)


# Softplus with a float beta, called with a keyword through a wrapper (nerfstudio's
# TruncExp-style activations take such parameters).
class Softplus(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return F.softplus(x, beta=beta)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(ctx.beta * x), None


def softplus(x: torch.Tensor, *, beta: float = 1.0) -> torch.Tensor:
    return Softplus.apply(x, beta)


# Binary cross-entropy with an integer target and float class weights that are not
# differentiated (mmcv / mmdet losses take a target and a weight tensor).
class WeightedBCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, weight):
        ctx.save_for_backward(logits, target, weight)
        return weight * (F.softplus(logits) - logits * target)

    @staticmethod
    def backward(ctx, grad):
        logits, target, weight = ctx.saved_tensors
        return grad * weight * (torch.sigmoid(logits) - target), None, None


# A sigmoid focal loss whose backward recomputes forward under enable_grad and differentiates
# it (the recompute pattern of torch.utils.checkpoint, applied to mmcv's focal loss).
def _focal(logits, target, gamma, alpha):
    p = torch.sigmoid(logits)
    t = F.one_hot(target, logits.shape[1]).to(logits.dtype)
    ce = F.binary_cross_entropy_with_logits(logits, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    return (alpha * t + (1 - alpha) * (1 - t)) * (1 - p_t) ** gamma * ce


class FocalLossRecompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, gamma, alpha):
        ctx.save_for_backward(logits, target)
        ctx.gamma, ctx.alpha = gamma, alpha
        return _focal(logits, target, gamma, alpha)

    @staticmethod
    def backward(ctx, grad):
        logits, target = ctx.saved_tensors
        with torch.enable_grad():
            leaf = logits if logits.requires_grad else logits.detach().requires_grad_()
            loss = _focal(leaf, target, ctx.gamma, ctx.alpha)
            (grad_logits,) = torch.autograd.grad(
                loss, leaf, grad, create_graph=torch.is_grad_enabled()
            )
        return grad_logits, None, None, None


# The same focal loss with mmcv's @once_differentiable backward, behind a lambda.
class FocalLossOnce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, gamma, alpha):
        ctx.save_for_backward(logits, target)
        ctx.gamma, ctx.alpha = gamma, alpha
        return _focal(logits, target, gamma, alpha)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        logits, target = ctx.saved_tensors
        with torch.enable_grad():
            leaf = logits.detach().requires_grad_()
            loss = _focal(leaf, target, ctx.gamma, ctx.alpha)
            (grad_logits,) = torch.autograd.grad(loss, leaf, grad)
        return grad_logits, None, None, None


# A log for a positive domain, clamped in backward (pyro's SafeLog).
class SafeLog(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x.clamp(min=torch.finfo(x.dtype).tiny)


# A power with a float exponent on positive inputs (gpytorch / pyro positive transforms).
class Power(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, exponent):
        ctx.save_for_backward(x)
        ctx.exponent = exponent
        return x**exponent

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ctx.exponent * x ** (ctx.exponent - 1), None


# A float32-only kernel that checks its dtype (apex's fused kernels refuse other dtypes).
class Float32OnlyTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.dtype != torch.float32:
            raise TypeError(f"Float32OnlyTanh: expected float32 input, got {x.dtype}")
        out = torch.tanh(x)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        return grad * (1 - out * out)


# Two outputs, both differentiable, the backward adding both gradients (apex's layer norm
# returns extra statistics; autograd_function_db's multi-output cases).
class ExpAndSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.exp(x)
        ctx.save_for_backward(out)
        return out, x.sum()

    @staticmethod
    def backward(ctx, grad_exp, grad_sum):
        (out,) = ctx.saved_tensors
        return grad_exp * out + grad_sum


# NumPy forward, torch backward on the saved input (autograd_function_db's NumpyCube forward).
class NumpySquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.from_numpy(x.detach().cpu().numpy() ** 2)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x


# A Function that also returns a NumPy array and a Python number (statistics returned for
# logging, as in detection losses).
class SquareWithStats(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2, x.detach().numpy().copy(), float(x.detach().abs().max())

    @staticmethod
    def backward(ctx, grad, _array, _number):
        (x,) = ctx.saved_tensors
        return grad * 2 * x


# A modern-style Function with a correct jvp (torch.func-ready, autograd_function_db).
class ModernSquare(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return x**2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return 2 * x * tangent


# A 4-bit-style matmul: float activations times a uint8 weight dequantised with a float scale
# (bitsandbytes / GPTQ-style kernels in transformers). Only the activations are differentiated.
class DequantMatMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight_uint8, scale):
        ctx.save_for_backward(weight_uint8, scale)
        return x @ (weight_uint8.to(x.dtype) * scale).T

    @staticmethod
    def backward(ctx, grad):
        weight_uint8, scale = ctx.saved_tensors
        return grad @ (weight_uint8.to(grad.dtype) * scale), None, None


# An exponential whose backward clamps its input (nerfstudio's TruncExp).
class TruncExp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.exp(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.exp(x.clamp(max=15))


# NumPy sort returning integer indices, whose backward is another NumPy-backed Function that
# is its own backward (autograd_function_db's NumpySort and NumpyTake).
class NumpyTake(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ind, ind_inv, dim):
        ctx.save_for_backward(ind, ind_inv)
        ctx.dim = dim
        taken = np.take_along_axis(x.detach().numpy(), ind.numpy(), dim)
        return torch.from_numpy(taken)

    @staticmethod
    def backward(ctx, grad):
        ind, ind_inv = ctx.saved_tensors
        return NumpyTake.apply(grad, ind_inv, ind, ctx.dim), None, None, None


class NumpySort(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim):
        ind = np.argsort(x.detach().numpy(), axis=dim)
        ind_inv = np.argsort(ind, axis=dim)
        values = np.take_along_axis(x.detach().numpy(), ind, dim)
        ind, ind_inv = torch.from_numpy(ind), torch.from_numpy(ind_inv)
        ctx.mark_non_differentiable(ind, ind_inv)
        ctx.save_for_backward(ind, ind_inv)
        ctx.dim = dim
        return torch.from_numpy(values), ind, ind_inv

    @staticmethod
    def backward(ctx, grad, _ind, _ind_inv):
        ind, ind_inv = ctx.saved_tensors
        return NumpyTake.apply(grad, ind_inv, ind, ctx.dim), None


# -- broken on purpose -------------------------------------------------------------------


# BROKEN: Swish keeping sigmoid(x) on ctx (a mistake seen in hand-written timm-style
# activations): the stashed tensor has no history.
class SwishStashed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.sig = torch.sigmoid(x)
        ctx.save_for_backward(x)
        return x * ctx.sig

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = ctx.sig
        return grad * (s * (1 + x * (1 - s)))


# BROKEN: a NumPy backward not wrapped in a Function (SciPy / C-extension backward, as in
# torch's tutorial): autograd records nothing.
class NumpyBackwardCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        result = 3 * x.detach().numpy() ** 2 * grad.detach().numpy()
        return torch.from_numpy(result)


# BROKEN: part of backward under no_grad (to "save memory").
class NoGradBackwardSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.no_grad():
            slope = 2 * x
        return grad * slope


# BROKEN: backward writes into a buffer with out= (a habit from C++ kernels' wrappers).
class OutBackwardSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        buffer = torch.empty_like(x)
        torch.mul(grad, 2 * x, out=buffer)
        return buffer


# BROKEN: forward refuses the input (a shape assertion, as kernels' wrappers do).
class Needs2D(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        if x.dim() != 2:
            raise ValueError(f"Needs2D: expected a 2-D input, got {x.dim()}-D")
        return x * 1

    @staticmethod
    def backward(ctx, grad):
        return grad


# BROKEN: a wrong first derivative (3x instead of 2x).
class WrongFirstDerivative(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x


# BROKEN: returns only a NumPy array (a Function used as a NumPy bridge).
class ReturnsNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.detach().numpy() * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


# BROKEN: a jvp that disagrees with backward (3x instead of 2x).
class WrongJvp(ModernSquare):
    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return 3 * x * tangent


def reentrant_checkpoint(x: torch.Tensor) -> torch.Tensor:
    """A reentrant checkpoint (transformers' gradient checkpointing): refuses .grad()."""
    return checkpoint(torch.sin, x, use_reentrant=True)


@dataclasses.dataclass
class Case:
    """One corpus entry: how to call it, its native twin, and what the checker must say."""

    id: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    native: Callable[..., Any] | None
    problems: frozenset[str] = frozenset()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    wrt: tuple[int, ...] | None = (
        None  # for the independent oracle (None: floating args)
    )


def _cases() -> list[Case]:
    g = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    def positive(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64) + 0.5

    target = torch.randint(0, 2, (4, 3), generator=g).to(torch.float64)
    labels = torch.randint(0, 3, (4,), generator=g)
    index = torch.randint(0, 5, (3, 2), generator=g)
    return [
        Case("relu-mask", ReLUMask.apply, (randn(3, 4),), torch.relu),
        Case("relu-saved-float-mask", ReLUSavedMask.apply, (randn(3, 4),), torch.relu),
        Case("scale-by-2", Double.apply, (randn(5),), lambda x: 2 * x),
        Case("view-flatten", Flatten.apply, (randn(2, 3),), lambda x: x.reshape(-1)),
        Case(
            "pad-tuple-and-none",
            ConstantPad.apply,
            (randn(2, 3), (1, 2), None),
            lambda x, pad, _: F.pad(x, pad),
        ),
        Case("sum-int-dim", SumDim.apply, (randn(3, 4), 1), lambda x, d: x.sum(d)),
        Case(
            "sort-index-output",
            SortValues.apply,
            (randn(3, 4),),
            lambda x: torch.sort(x, dim=-1).values,
        ),
        Case(
            "gather-int-index",
            Gather.apply,
            (randn(3, 5), index),
            lambda x, i: x.gather(1, i),
        ),
        Case("inplace-relu-mark-dirty", InplaceReLU.apply, (randn(3, 4),), torch.relu),
        Case("matmul", MatMul.apply, (randn(3, 4), randn(4, 2)), torch.matmul),
        Case("broadcast-mul", BroadcastMul.apply, (randn(3, 4), randn(4)), torch.mul),
        Case(
            "bilinear-three-shapes",
            BilinearForm.apply,
            (randn(4, 3), randn(4, 5), randn(3, 5)),
            lambda a, b, w: torch.einsum("bi,ij,bj->b", a, w, b),
        ),
        Case(
            "linear-none-bias",
            Linear.apply,
            (randn(4, 3), randn(2, 3), None),
            lambda x, w, b: F.linear(x, w),
        ),
        Case("swish", Swish.apply, (randn(3, 4),), F.silu),
        Case("mish", Mish.apply, (randn(3, 4),), F.mish),
        Case("hard-swish", HardSwish.apply, (randn(3, 4) * 2,), F.hardswish),
        Case("sigmoid-saves-output", Sigmoid.apply, (randn(3, 4),), torch.sigmoid),
        Case(
            "softplus-keyword-beta",
            softplus,
            (randn(3, 4),),
            lambda x, beta: F.softplus(x, beta=beta),
            kwargs={"beta": 2.0},
        ),
        Case(
            "bce-int-target-float-weight",
            WeightedBCE.apply,
            (randn(4, 3), target, positive(3)),
            lambda x, t, w: (
                w * F.binary_cross_entropy_with_logits(x, t, reduction="none")
            ),
            options={"wrt": (0,)},
            wrt=(0,),
        ),
        Case(
            "focal-loss-recompute",
            FocalLossRecompute.apply,
            (randn(4, 3), labels, 2.0, 0.25),
            _focal,
        ),
        Case("safe-log-positive", SafeLog.apply, (positive(3, 4),), torch.log),
        Case("power-float-exponent", Power.apply, (positive(3, 4), 1.5), torch.pow),
        Case("float32-only", Float32OnlyTanh.apply, (randn(3, 4).float(),), torch.tanh),
        Case(
            "two-differentiable-outputs",
            ExpAndSum.apply,
            (randn(3, 4),),
            lambda x: (torch.exp(x), x.sum()),
        ),
        Case("numpy-forward", NumpySquare.apply, (randn(3, 4),), lambda x: x**2),
        Case(
            "numpy-and-number-outputs",
            SquareWithStats.apply,
            (randn(3, 4),),
            lambda x: x**2,
        ),
        Case("modern-with-jvp", ModernSquare.apply, (randn(3, 4),), lambda x: x**2),
        Case("project-sinh", sinh, (randn(3, 4),), torch.sinh),
        Case(
            "gallery-numpy-under-vmap",
            failures.CubeBackwardNumpyUnderVmap.apply,
            (randn(3), randn(3)),
            lambda g, x: 3 * x**2 * g,
        ),
        Case(
            "gallery-without-jvp",
            failures.SquareWithoutJvp.apply,
            (randn(3, 4),),
            lambda x: x**2,
        ),
        Case(
            "dequant-matmul-uint8-weight",
            DequantMatMul.apply,
            (
                randn(4, 3),
                torch.randint(0, 16, (2, 3), generator=g, dtype=torch.uint8),
                positive(2, 1),
            ),
            lambda x, w, s: x @ (w.to(x.dtype) * s).T,
            options={"wrt": (0,)},
            wrt=(0,),
        ),
        Case("trunc-exp", TruncExp.apply, (randn(3, 4),), torch.exp),
        Case(
            "numpy-sort-and-take",
            NumpySort.apply,
            (randn(3, 4), 1),
            lambda x, d: torch.sort(x, dim=d).values,
        ),
        # -- broken ----------------------------------------------------------------------
        Case(
            "gallery-stashed-on-ctx",
            SinhBad.apply,
            (randn(3, 4),),
            torch.sinh,
            frozenset({"stashed-on-ctx"}),
        ),
        Case(
            "gallery-saved-intermediate",
            failures.SinhSavesIntermediate.apply,
            (randn(3, 4),),
            torch.sinh,
            frozenset({"saved-intermediate"}),
        ),
        Case(
            "gallery-non-differentiable-outputs",
            lambda x: failures.SinhNonDifferentiableExtras.apply(x)[0],
            (randn(3, 4),),
            torch.sinh,
            frozenset({"non-differentiable-outputs"}),
        ),
        Case(
            "gallery-dropped-extra-grads",
            failures.sinh_drops_extra_grads,
            (randn(3, 4),),
            torch.sinh,
            frozenset({"wrong-second-derivative"}),
        ),
        Case(
            "gallery-detached",
            failures.SquareDetachesInBackward.apply,
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"no-graph"}),
        ),
        Case(
            "gallery-once-differentiable-behind-lambda",
            lambda x: failures.SquareOnceDifferentiable.apply(x),
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"once-differentiable"}),
        ),
        Case(
            "focal-loss-once-differentiable-behind-lambda",
            lambda x, t: FocalLossOnce.apply(x, t, 2.0, 0.25),
            (randn(4, 3), labels),
            lambda x, t: _focal(x, t, 2.0, 0.25),
            frozenset({"once-differentiable"}),
        ),
        Case(
            "swish-stashed-sigmoid",
            SwishStashed.apply,
            (randn(3, 4),),
            F.silu,
            frozenset({"stashed-on-ctx"}),
        ),
        Case(
            "numpy-backward",
            NumpyBackwardCube.apply,
            (randn(3, 4),),
            lambda x: x**3,
            frozenset({"no-graph"}),
        ),
        Case(
            "no-grad-in-backward",
            NoGradBackwardSquare.apply,
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"no-graph"}),
        ),
        Case(
            "out-in-backward",
            OutBackwardSquare.apply,
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"out-in-backward"}),
        ),
        Case(
            "wrong-first-derivative",
            WrongFirstDerivative.apply,
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"first-order"}),
        ),
        Case(
            "wrong-jvp",
            WrongJvp.apply,
            (randn(3, 4),),
            lambda x: x**2,
            frozenset({"forward-mode-mismatch"}),
        ),
        Case(
            "reentrant-checkpoint",
            reentrant_checkpoint,
            (randn(3, 4),),
            torch.sin,
            frozenset({"backward-raised"}),
        ),
        Case(
            "raises-in-forward",
            Needs2D.apply,
            (randn(3),),
            None,
            frozenset({"function-raised"}),
        ),
        Case(
            "returns-only-numpy",
            ReturnsNumpy.apply,
            (randn(3),),
            None,
            frozenset({"no-differentiable-output"}),
        ),
        Case(
            "log-outside-its-domain",
            SafeLog.apply,
            (-positive(3),),
            None,
            frozenset({"non-finite"}),
        ),
    ]


CASES = _cases()
