"""Functions the checker's benchmark and its tests share (``nox -s bench_checker``,
``tests/test_checker_scaling.py``, ``tests/checker_corpus.py``): an RMSNorm that saves an
intermediate and one that recomputes it, and a Function with a planted 5% Hessian error, with
the count of checks that miss it.

Here, not in ``tests/``, so that the benchmark needs neither pytest nor the test suite; torch
and the package only.
"""

from __future__ import annotations

import torch

from double_backward.checker.function import calling, evidence


# BROKEN: an RMSNorm saving rstd = 1/sqrt(mean(x²) + eps) as an intermediate (Liger-Kernel's
# and apex's fused RMSNorm save it to skip a reduction in backward). Over a wide row the
# derivative through rstd is small per element, but the Hessian-vector product is ~10% off.
class RMSNormSavesRstd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return x * rstd * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight, rstd = ctx.saved_tensors
        return _rms_norm_backward(grad, x, weight, rstd)


# The same RMSNorm recomputing rstd in backward from the saved input: correct.
class RMSNormRecompute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + ctx.eps)
        return _rms_norm_backward(grad, x, weight, rstd)


def _rms_norm_backward(grad, x, weight, rstd):
    x_hat = x * rstd
    grad_w_out = grad * weight
    grad_x = rstd * (grad_w_out - x_hat * (grad_w_out * x_hat).mean(-1, keepdim=True))
    grad_weight = (grad * x_hat).reshape(-1, x.shape[-1]).sum(0)
    return grad_x, grad_weight, None


def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


# -- the detection bound: a planted error ----------------------------------------------------


class _CubeGradWithError(torch.autograd.Function):
    """g = 3x²v, the backward of x³. Its own backward is right except on element 0, which
    gets 5% of |6xv| more: the HVP is 5% wrong (relative, Frobenius), all on one element,
    the hardest error for random directions to meet."""

    @staticmethod
    def forward(ctx, x, v):
        ctx.save_for_backward(x, v)
        return 3 * x * x * v

    @staticmethod
    def backward(ctx, gg):
        x, v = ctx.saved_tensors
        extra = torch.zeros_like(x).reshape(-1)
        extra[0] = ERROR * (6 * x * v).detach().norm() * gg.reshape(-1)[0]
        return 6 * x * v * gg + extra.reshape(x.shape), 3 * x * x * gg


class CubeWithHvpError(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _CubeGradWithError.apply(x, grad)


ERROR = 0.05


def misses(directions: int, trials: int) -> int:
    """How often the HVP check passes the planted 5% error, at 1000 elements."""
    generator = torch.Generator().manual_seed(0)
    missed = 0
    for _ in range(trials):
        x = torch.randn(1000, generator=generator, dtype=torch.float64)
        call = calling.Call(CubeWithHvpError.apply, (x,), {}, [0], kept=[0])
        settings = evidence.Settings(torch.float64, directions, "none", generator)
        try:
            evidence.hvp_directions(call, (x,), settings)
        except evidence.Failed:
            continue
        missed += 1
    return missed
