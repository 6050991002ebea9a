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

# An RMSNorm saving rstd (BROKEN) and one recomputing it: the checker's benchmark times them
# too, and a benchmark imports nothing from tests/.
from benchmarks.checker_cases import RMSNormRecompute, RMSNormSavesRstd, rms_norm
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


# -- patterns from the checker's second review (issue #17) -------------------------------


# CompressAI's LowerBound: forward max(x, bound); backward lets negative gradients through
# below the bound, so that the optimiser can push x back up. Not linear in grad_out: the
# backward of -v is not minus the backward of v.
class LowerBound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bound):
        ctx.save_for_backward(x, bound)
        return torch.max(x, bound)

    @staticmethod
    def backward(ctx, grad):
        x, bound = ctx.saved_tensors
        pass_through = (x >= bound) | (grad < 0)
        return pass_through.to(grad.dtype) * grad, None


# BROKEN: a LayerNorm saving mean and rstd (apex's FusedLayerNorm, Triton's layer-norm
# tutorial): both are intermediates without history.
class LayerNormSavesStats(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        mean = x.mean(-1, keepdim=True)
        rstd = torch.rsqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
        ctx.save_for_backward(x, mean, rstd)
        return (x - mean) * rstd

    @staticmethod
    def backward(ctx, grad):
        x, mean, rstd = ctx.saved_tensors
        x_hat = (x - mean) * rstd
        return rstd * (grad - grad.mean(-1, keepdim=True)
                       - x_hat * (grad * x_hat).mean(-1, keepdim=True))  # fmt: skip


# A dropout whose mask comes from a seed= keyword (Triton's "low-memory dropout" tutorial):
# the keyword collides with any checker option called seed.
class _SeededDropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, p, seed):
        mask = _dropout_mask(x, p, seed)
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask, None, None


def _dropout_mask(x, p, seed):
    generator = torch.Generator().manual_seed(seed)
    keep = torch.rand(x.shape, generator=generator) > p
    return keep.to(x.dtype) / (1 - p)


def seeded_dropout(x, *, p=0.5, seed):
    return _SeededDropout.apply(x, p, seed)


# A cast-and-scale with a dtype= keyword (quantisation helpers take the target dtype): it
# collides with the checker's dtype option.
class _CastScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, dtype):
        ctx.scale, ctx.dtype = scale, x.dtype
        return (x * scale).to(dtype)

    @staticmethod
    def backward(ctx, grad):
        return (grad * ctx.scale).to(ctx.dtype), None, None


def cast_scale(x, *, scale, dtype):
    return _CastScale.apply(x, scale, dtype)


# z ↦ z² on complex inputs (complex layers of torchcvnn / complexPyTorch): holomorphic, the
# gradient is grad_out * conj(2z) in PyTorch's convention.
class ComplexSquare(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * (2 * z).conj()


# BROKEN: the same without the conjugate, the classic mistake with complex inputs.
class ComplexSquareNoConj(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * 2 * z


# |z| of a complex input, a real output (complex-valued networks' magnitude activations).
class ComplexAbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z.abs()

    @staticmethod
    def backward(ctx, grad):
        (z,) = ctx.saved_tensors
        return grad * z / z.abs()


# A real-to-complex FFT with a complex output (spectral layers of FNO / neuraloperator).
class RealFFT(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.fft.fft(x)

    @staticmethod
    def backward(ctx, grad):
        # y = F x with F[k, n] = exp(-2πi kn/N): grad_x = Re(Fᴴ grad) = Re(N ifft(grad)).
        return (torch.fft.ifft(grad) * grad.shape[-1]).real


# Straight-through rounding (quantisation-aware training, VQ-VAE's straight-through trick):
# a surrogate gradient on purpose.
class StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


# Gradient reversal (DANN, Ganin & Lempitsky): identity forward, -lambda * grad backward.
class GradientReversal(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lambda_):
        ctx.lambda_ = lambda_
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return -ctx.lambda_ * grad, None


# A VQ-VAE quantiser (van den Oord et al.; the codebook lookup of vqtorch / taming): each row
# of z is replaced by its nearest code. The gradient goes straight through to z, and to the
# chosen codes by a scatter-add, which is the true derivative with respect to the codebook.
class VectorQuantize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, codebook):
        index = torch.cdist(z, codebook).argmin(-1)
        ctx.save_for_backward(index)
        ctx.num_codes = codebook.shape[0]
        return codebook[index]

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        grad_codebook = grad.new_zeros(ctx.num_codes, grad.shape[-1])
        return grad, grad_codebook.index_add(0, index, grad)


def vector_quantize_native(z, codebook):
    index = torch.cdist(z, codebook).argmin(-1)
    return z - z.detach() + codebook[index]


# BROKEN surrogate: a spiking neuron's step with a sigmoid surrogate derivative (snnTorch,
# SpikingJelly), saving the sigmoid as an intermediate: its derivative is lost.
class SigmoidSurrogateSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(torch.sigmoid(4 * x))
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * 4 * s * (1 - s)


def sigmoid_surrogate_spike_native(x):
    s = torch.sigmoid(4 * x)
    return (x > 0).to(x.dtype) + s - s.detach()


# BROKEN: soft-DTW with a NumPy forward and backward (pytorch-softdtw, after Cuturi & Blondel
# 2017) on a cost matrix D. Forward saves the DP table R, an intermediate; but what breaks
# double backward is the NumPy backward: the gradient has no graph at all.
class SoftDTWNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, cost, gamma):
        R = _soft_dtw_table(cost.detach().numpy(), gamma)
        table = torch.from_numpy(R)
        ctx.save_for_backward(cost, table)
        ctx.gamma = gamma
        return table[-2, -2].clone()

    @staticmethod
    def backward(ctx, grad):
        cost, table = ctx.saved_tensors
        E = _soft_dtw_grad(cost.detach().numpy(), table.numpy().copy(), ctx.gamma)
        return grad * torch.from_numpy(E), None


_FAR = 1e10  # "infinity" in the DP table, finite so that the native twin has no 0 * inf


def _soft_dtw_table(D, gamma):
    n, m = D.shape
    R = np.full((n + 2, m + 2), _FAR)
    R[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            r = -np.array([R[i - 1, j - 1], R[i - 1, j], R[i, j - 1]]) / gamma
            top = r.max()
            R[i, j] = D[i - 1, j - 1] - gamma * (np.log(np.exp(r - top).sum()) + top)
    return R


def _soft_dtw_grad(D, R, gamma):
    n, m = D.shape
    D_ = np.zeros((n + 2, m + 2))
    D_[1 : n + 1, 1 : m + 1] = D
    E = np.zeros((n + 2, m + 2))
    E[-1, -1] = 1.0
    R[:, -1] = -np.inf
    R[-1, :] = -np.inf
    R[-1, -1] = R[-2, -2]
    for j in range(m, 0, -1):
        for i in range(n, 0, -1):
            a = np.exp((R[i + 1, j] - R[i, j] - D_[i + 1, j]) / gamma)
            b = np.exp((R[i, j + 1] - R[i, j] - D_[i, j + 1]) / gamma)
            c = np.exp((R[i + 1, j + 1] - R[i, j] - D_[i + 1, j + 1]) / gamma)
            E[i, j] = E[i + 1, j] * a + E[i, j + 1] * b + E[i + 1, j + 1] * c
    return E[1 : n + 1, 1 : m + 1]


def soft_dtw_native(cost, gamma):
    n, m = cost.shape
    far = cost.new_tensor(_FAR)
    R = [[far] * (m + 1) for _ in range(n + 1)]
    R[0][0] = cost.new_tensor(0.0)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            r = torch.stack([R[i - 1][j - 1], R[i - 1][j], R[i][j - 1]])
            R[i][j] = cost[i - 1, j - 1] - gamma * torch.logsumexp(-r / gamma, 0)
    return R[n][m]


# BROKEN: a linear layer whose backward reads weight.data (an old habit from before
# autograd merged Variable and Tensor). The input gradient grad @ W has no graph back to W:
# only the mixed term d(grad_x)/dW is lost; d²/dx² and d²/dW² are zero anyway.
class LinearWeightData(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.T

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight.data, grad.T @ x


def reentrant_checkpoint(x: torch.Tensor) -> torch.Tensor:
    """A reentrant checkpoint (transformers' gradient checkpointing): refuses .grad()."""
    return checkpoint(torch.sin, x, use_reentrant=True)


# -- patterns from issue 27: broken Functions that used to pass at 1e3-1e5 elements, or
# whose cause was misnamed. Each has a ``*_inputs(size)`` builder for the size sweep.


# BROKEN: xformers' SwiGLU (xformers.ops.swiglu, _SwiGLUDecomposedFunc) computes x @ w1 and
# x @ w2 inside forward and saves them, and its backward works on float32 copies
# (``.float()``). The saved products have no history, so the second derivative is wrong
# (about 0.8 of the HVP); the float32 casts make every small step round.
class SwiGLUSavesProducts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w1, w2):
        gate, up = x @ w1, x @ w2
        ctx.save_for_backward(x, w1, w2, gate, up)
        return F.silu(gate) * up

    @staticmethod
    def backward(ctx, grad):
        x, w1, w2, gate, up = ctx.saved_tensors
        g32, gate32, up32 = grad.float(), gate.float(), up.float()
        sig = torch.sigmoid(gate32)
        d_gate = (g32 * up32 * sig * (1 + gate32 * (1 - sig))).to(grad.dtype)
        d_up = (g32 * gate32 * sig).to(grad.dtype)
        return d_gate @ w1.T + d_up @ w2.T, x.T @ d_gate, x.T @ d_up


def swiglu_native(x, w1, w2):
    return F.silu(x @ w1) * (x @ w2)


def swiglu_inputs(size, generator):
    rows, width, hidden = max(2, size // 64), 16, 32  # about `size` elements in all
    return (
        torch.randn(rows, width, generator=generator, dtype=torch.float64),
        torch.randn(width, hidden, generator=generator, dtype=torch.float64) / 4,
        torch.randn(width, hidden, generator=generator, dtype=torch.float64) / 4,
    )


def _entmax15_threshold(z: torch.Tensor) -> torch.Tensor:
    """tau with sum(clamp(z - tau, 0)^2) = 1 along the last dim (exact, by sorting)."""
    z_sorted, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    mean = z_sorted.cumsum(-1) / k
    mean_sq = (z_sorted**2).cumsum(-1) / k
    delta = (1 - k * (mean_sq - mean**2)) / k
    tau = mean - torch.sqrt(delta.clamp(min=0))
    support = (tau <= z_sorted).sum(dim=-1, keepdim=True)
    return tau.gather(-1, support - 1)


# BROKEN: entmax's Entmax15Function (deep-spin/entmax) saves its output Y and differentiates
# through sqrt(Y) in backward. Y is exactly 0 off the support, where sqrt has an infinite
# derivative: the Hessian-vector product is NaN (0 * inf), everywhere the row sums spread it.
class Entmax15(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        z = x / 2
        z = z - z.max(dim=-1, keepdim=True).values
        y = torch.clamp(z - _entmax15_threshold(z), min=0) ** 2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        root = y.sqrt()
        d = grad * root
        q = d.sum(-1, keepdim=True) / root.sum(-1, keepdim=True)
        return d - q * root


def entmax15_native(x):
    """The same map by differentiable torch operations (the threshold through autograd)."""
    z = x / 2
    z = z - z.max(dim=-1, keepdim=True).values
    return torch.clamp(z - _entmax15_threshold(z), min=0) ** 2


def entmax15_inputs(size, generator):
    return (torch.randn(max(1, size // 10), 10, generator=generator, dtype=torch.float64) * 3,)


# BROKEN: snntorch's Heaviside spike (snntorch.surrogate.Heaviside) returns (x > 0).float(),
# a float32 step, and passes grad * spike back. The step is flat almost everywhere: the true
# derivative is 0, so its backward is not the derivative (a surrogate, unmarked).
class HeavisideFloat32(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        spike = (x > 0).float()
        ctx.save_for_backward(spike)
        return spike

    @staticmethod
    def backward(ctx, grad):
        (spike,) = ctx.saved_tensors
        return grad * spike


def heaviside_inputs(size, generator):
    return (torch.randn(size, generator=generator, dtype=torch.float64),)


# BROKEN for a second backward through one graph: DGL's EdgeSoftmax
# (dgl.ops.edge_softmax) keeps the graph on ctx.backward_cache and sets it to None in
# backward, to free memory. One backward works (double backward included); a second one on
# the same graph (retain_graph=True, or gradcheck's Jacobians) raises.
class EdgeSoftmaxClearsCache(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, destination, nodes):
        e = torch.exp(scores - scores.max())  # any shift cancels within each node's edges
        total = torch.zeros(nodes, dtype=scores.dtype).index_add_(0, destination, e)
        out = e / total[destination]
        ctx.backward_cache = (destination, nodes)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        destination, nodes = ctx.backward_cache
        ctx.backward_cache = None  # free the graph early
        (out,) = ctx.saved_tensors
        weighted = grad * out
        per_node = torch.zeros(nodes, dtype=grad.dtype).index_add(0, destination, weighted)
        return weighted - out * per_node[destination], None, None


def edge_softmax_native(scores, destination, nodes):
    e = torch.exp(scores - scores.detach().max())
    total = torch.zeros(nodes, dtype=scores.dtype).index_add(0, destination, e)
    return e / total[destination]


def edge_softmax_inputs(size, generator):
    nodes = max(2, size // 8)
    destination = torch.randint(0, nodes, (size,), generator=generator)
    return (torch.randn(size, generator=generator, dtype=torch.float64), destination, nodes)


# BROKEN: unsloth's RoPE (unsloth/kernels/rope_embedding.py, Slow_RoPE_Embedding) rotates
# its incoming gradient in place (``dY *= cos; dY.addcmul_(...)``) and returns it. Under
# create_graph the incoming gradient of a penalty requires grad, and the in-place edit
# raises; without it, the caller's gradient tensor is silently overwritten.
class RoPEInplaceGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, cos, sin):
        ctx.save_for_backward(cos, sin)
        return q * cos + _rotate_half(q) * sin

    @staticmethod
    def backward(ctx, dy):
        cos, sin = ctx.saved_tensors
        rotated = -_rotate_half(dy)
        dy *= cos
        dy.addcmul_(rotated, sin)
        return dy, None, None


def _rotate_half(t):
    half = t.shape[-1] // 2
    return torch.cat((-t[..., half:], t[..., :half]), dim=-1)


def rope_native(q, cos, sin):
    return q * cos + _rotate_half(q) * sin


def rope_inputs(size, generator):
    rows, dim = max(1, size // 16), 16
    angle = torch.arange(rows, dtype=torch.float64)[:, None] * torch.linspace(0.1, 1, dim // 2,
                                                                              dtype=torch.float64)
    angle = torch.cat((angle, angle), dim=-1)
    q = torch.randn(rows, dim, generator=generator, dtype=torch.float64)
    return (q, angle.cos(), angle.sin())


# BROKEN: torchsort's SoftRank (teddykoker/torchsort) saves a constant (1 / regularization
# strength, a tensor that is no function of the input) and computes its backward with a
# NumPy routine, whose result has no graph. The constant is harmless; the NumPy term is the
# cause.
class SoftRankNumpy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strength):
        scale = torch.tensor(1.0 / strength, dtype=x.dtype)
        ctx.save_for_backward(x, scale)
        diff = (x[..., :, None] - x[..., None, :]) * scale
        return torch.sigmoid(diff).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        g, xs, c = grad.detach().numpy(), x.detach().numpy(), float(scale)
        s = 1 / (1 + np.exp(-(xs[..., :, None] - xs[..., None, :]) * c))
        pair = c * s * (1 - s)  # d rank_i / d x_i = sum_j pair_ij; d rank_i / d x_j = -pair_ij
        dx = g * pair.sum(-1) - np.einsum("...i,...ij->...j", g, pair)
        return torch.from_numpy(dx), None


def soft_rank_native(x, strength):
    return torch.sigmoid((x[..., :, None] - x[..., None, :]) / strength).sum(-1)


def soft_rank_inputs(size, generator):
    return (torch.randn(max(1, size // 8), 8, generator=generator, dtype=torch.float64), 2.0)


# BROKEN: qpth's QPFunction keeps the LU factorisation of its KKT matrix in a tuple on ctx
# (``ctx.Q_LU = (data, pivots)``) and its dual variables as ``ctx.nus``, both made in forward
# with no history. Modelled on a linear solve z = Q^-1 p, whose backward solves with the kept
# factor and uses the kept solution.
class SolveKeepsLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, p):
        factor, pivots = torch.linalg.lu_factor(q)
        z = torch.linalg.lu_solve(factor, pivots, p[:, None])[:, 0]
        ctx.Q_LU = (factor, pivots)
        ctx.nus = z.clone()  # qpth's duals: tensors of forward's, not its output
        return z

    @staticmethod
    def backward(ctx, grad):
        factor, pivots = ctx.Q_LU
        dp = torch.linalg.lu_solve(factor, pivots, grad[:, None], adjoint=True)[:, 0]
        return -dp[:, None] * ctx.nus[None, :], dp


def solve_native(q, p):
    return torch.linalg.solve(q, p)


def solve_inputs(size, generator):
    n = max(2, int(size**0.5))
    q = torch.randn(n, n, generator=generator, dtype=torch.float64) / n**0.5
    return (q + 2 * torch.eye(n, dtype=torch.float64), torch.randn(n, generator=generator,
                                                                  dtype=torch.float64))


@dataclasses.dataclass(frozen=True)
class Pattern:
    """A broken pattern of issue 27 at any size: its Function, inputs, twin, problem."""

    id: str
    fn: Callable[..., Any]
    inputs: Callable[[int, torch.Generator], tuple[Any, ...]]
    native: Callable[..., Any] | None
    problems: frozenset[str]


PATTERNS = [
    Pattern("xformers-swiglu-saves-products", SwiGLUSavesProducts.apply, swiglu_inputs,
            swiglu_native, frozenset({"saved-intermediate"})),
    Pattern("entmax15-nan-hvp", Entmax15.apply, entmax15_inputs, entmax15_native,
            frozenset({"non-finite-second-derivative"})),
    Pattern("snntorch-heaviside-float32", HeavisideFloat32.apply, heaviside_inputs, None,
            frozenset({"first-order"})),
    Pattern("dgl-edge-softmax-clears-cache", EdgeSoftmaxClearsCache.apply,
            edge_softmax_inputs, edge_softmax_native, frozenset({"backward-clears-state"})),
    Pattern("unsloth-rope-inplace-grad", RoPEInplaceGrad.apply, rope_inputs, rope_native,
            frozenset({"modifies-incoming-gradient"})),
    Pattern("torchsort-soft-rank-numpy", SoftRankNumpy.apply, soft_rank_inputs,
            soft_rank_native, frozenset({"no-graph"})),
    Pattern("qpth-lu-in-a-tuple-on-ctx", SolveKeepsLU.apply, solve_inputs, solve_native,
            frozenset({"stashed-on-ctx"})),
]  # fmt: skip


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

    def crandn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.complex128)

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
        Case(
            "rms-norm-recompute-wide-row",
            RMSNormRecompute.apply,
            (randn(100, 100), positive(100), 1e-6),
            rms_norm,
        ),
        Case(
            "dropout-seed-keyword",
            seeded_dropout,
            (randn(3, 4),),
            lambda x, *, p, seed: x * _dropout_mask(x, p, seed),
            kwargs={"p": 0.25, "seed": 3},
        ),
        Case(
            "cast-scale-dtype-keyword",
            cast_scale,
            (randn(3, 4),),
            lambda x, *, scale, dtype: (x * scale).to(dtype),
            kwargs={"scale": 2.0, "dtype": torch.float64},
        ),
        Case("complex-square", ComplexSquare.apply, (crandn(3, 4),), lambda z: z * z),
        Case("complex-abs", ComplexAbs.apply, (crandn(3, 4),), torch.abs),
        Case("real-fft-complex-output", RealFFT.apply, (randn(3, 8),), torch.fft.fft),
        Case(
            "straight-through-round-surrogate",
            StraightThroughRound.apply,
            (randn(3, 4) * 3,),
            lambda x: x + (torch.round(x) - x).detach(),
            options={"surrogate_gradient": True},
        ),
        Case(
            "gradient-reversal-surrogate",
            GradientReversal.apply,
            (randn(3, 4), 0.5),
            lambda x, lam: -lam * x + ((1 + lam) * x).detach(),
            options={"surrogate_gradient": True},
        ),
        Case(
            "vq-vae-codebook-surrogate",
            VectorQuantize.apply,
            (randn(6, 3), randn(5, 3)),
            vector_quantize_native,
            options={"surrogate_gradient": True},
        ),
        # -- broken ----------------------------------------------------------------------
        Case(
            "lower-bound-nonlinear-in-grad-out",
            LowerBound.apply,
            (randn(3, 4), torch.tensor(0.1, dtype=torch.float64)),
            torch.max,
            frozenset({"backward-not-linear"}),
            options={"wrt": (0,)},
            wrt=(0,),
        ),
        Case(
            "rms-norm-saves-rstd-wide-row",
            RMSNormSavesRstd.apply,
            (randn(100, 100), positive(100), 1e-6),
            rms_norm,
            frozenset({"saved-intermediate"}),
        ),
        Case(
            "layer-norm-saves-stats",
            LayerNormSavesStats.apply,
            (randn(8, 16),),
            lambda x: F.layer_norm(x, (16,)),
            frozenset({"saved-intermediate"}),
        ),
        Case(
            "complex-square-no-conjugate",
            ComplexSquareNoConj.apply,
            (crandn(3, 4),),
            lambda z: z * z,
            frozenset({"first-order"}),
        ),
        Case(
            "straight-through-round-without-surrogate-mode",
            StraightThroughRound.apply,
            (randn(3, 4) * 3,),
            torch.round,
            frozenset({"first-order"}),
        ),
        Case(
            "surrogate-spike-saves-sigmoid",
            SigmoidSurrogateSpike.apply,
            (randn(3, 4),),
            sigmoid_surrogate_spike_native,
            frozenset({"saved-intermediate"}),
            options={"surrogate_gradient": True},
        ),
        Case(
            "soft-dtw-numpy-backward",
            SoftDTWNumpy.apply,
            (positive(4, 5), 0.5),
            soft_dtw_native,
            frozenset({"no-graph"}),
        ),
        Case(
            "linear-reads-weight-data",
            LinearWeightData.apply,
            (randn(4, 3), randn(2, 3)),
            lambda x, w: x @ w.T,
            frozenset({"no-graph"}),
        ),
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
    ] + [
        Case(p.id, p.fn, p.inputs(40, g), p.native, p.problems) for p in PATTERNS
    ]


CASES = _cases()
