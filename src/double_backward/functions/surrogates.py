"""Surrogate gradients: Functions whose backward is deliberately *not* the derivative.

Rounding, a step or a clamp has a derivative that is zero (or absent) almost everywhere, so
training through it needs a stand-in: a *surrogate* backward. The surrogate is the derivative
of some other, smooth function s, chosen on purpose; double backward then has one right
answer: the derivative of the backward you wrote, i.e. of s' (s'' along x, s' along grad_out).
It is not the second derivative of forward. Each backward here is made of recorded operations
on saved inputs, so that answer is what autograd computes, to every order.

``FastSigmoidSpikeSavesSurrogate`` is **broken on purpose**: it computes its surrogate in
forward and saves it, which drops the s'' term.
"""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class RoundSTE(torch.autograd.Function):
    """y = round(x) with the straight-through estimator: backward passes grad_out unchanged.

    The surrogate is s(x) = x: grad_x = grad_out, which does not depend on x. Double backward:
    along grad_out the derivative is the identity (what a gradient penalty differentiates
    through), along x it is zero. Nothing needs saving. Quantisation is
    ``scale * RoundSTE.apply(x / scale)``.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("RoundSTE", "x", x)
        return torch.round(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        return grad_out


class GradientReversal(torch.autograd.Function):
    """y = x, with grad_x = -λ · grad_out: the gradient reversal layer of DANN.

    Ganin & Lempitsky's domain-adversarial training puts it between the feature extractor and
    the domain classifier, so the features are trained to *fool* the classifier. The surrogate
    is s(x) = -λx: double backward is -λ along grad_out and zero along x. Forward returns
    ``x.view_as(x)``, a new tensor object sharing x's memory, as the usual implementations do.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lambda_: float = 1.0) -> torch.Tensor:
        check_real_tensor("GradientReversal", "x", x)
        if not isinstance(lambda_, (int, float)) or isinstance(lambda_, bool):
            raise TypeError(
                f"GradientReversal: 'lambda_' must be a number, got {type(lambda_).__name__}"
            )
        ctx.lambda_ = lambda_  # a Python number, not a tensor: nothing to track
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        return -ctx.lambda_ * grad_out, None


class ClampPassThrough(torch.autograd.Function):
    """y = clamp(x, min, max), with a backward that passes grad_out through, even outside.

    Used where a clamp must not stop learning (clamped actions, pixel values, latent codes):
    the surrogate is s(x) = x, so double backward is the identity along grad_out and zero along
    x, as for ``RoundSTE``. ``torch.clamp`` itself would give zero gradient outside
    [min, max].
    """

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, min: float = -1.0, max: float = 1.0
    ) -> torch.Tensor:
        check_real_tensor("ClampPassThrough", "x", x)
        if not min <= max:
            raise ValueError(
                f"ClampPassThrough: need min <= max, got min={min}, max={max}"
            )
        return torch.clamp(x, min, max)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad_out, None, None


def _check_slope(function_name: str, slope: Any) -> None:
    if isinstance(slope, bool) or not isinstance(slope, (int, float)) or slope <= 0:
        raise ValueError(
            f"{function_name}: 'slope' must be a positive number, got {slope!r}"
        )


class FastSigmoidSpike(torch.autograd.Function):
    """A spike y = 1 if x > 0 else 0, with the fast-sigmoid surrogate gradient of SuperSpike.

    Spiking networks (Zenke & Ganguli's SuperSpike, snnTorch's ``fast_sigmoid``) train through
    the step with grad_x = grad_out / (1 + k|x|)², the derivative of s(x) = x / (1 + k|x|).
    Backward computes it from the saved *input* x with recorded ops, so double backward has
    both terms: 1 / (1 + k|x|)² along grad_out, and s''(x) = -2k·sign(x) / (1 + k|x|)³ along x.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, slope: float = 25.0) -> torch.Tensor:
        check_real_tensor("FastSigmoidSpike", "x", x)
        _check_slope("FastSigmoidSpike", slope)
        ctx.save_for_backward(x)
        ctx.slope = slope
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        return grad_out / (1 + ctx.slope * x.abs()) ** 2, None


class FastSigmoidSpikeSavesSurrogate(torch.autograd.Function):
    """BROKEN ON PURPOSE: ``FastSigmoidSpike`` computing its surrogate 1/(1 + k|x|)² in forward.

    Forward is not recorded, so the saved surrogate is an intermediate with no history:
    grad_x = grad_out · surrogate is right along grad_out but has no graph back to x, so the
    s'' term of double backward is missing. Fix: save x and compute the surrogate in backward,
    as ``FastSigmoidSpike`` does.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, slope: float = 25.0) -> torch.Tensor:
        check_real_tensor("FastSigmoidSpikeSavesSurrogate", "x", x)
        _check_slope("FastSigmoidSpikeSavesSurrogate", slope)
        ctx.save_for_backward(1 / (1 + slope * x.abs()) ** 2)  # no history
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (surrogate,) = ctx.saved_tensors
        return grad_out * surrogate, None
