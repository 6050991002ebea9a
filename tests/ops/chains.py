"""References shared by the ops' tests: derivative chains to the third order, and inputs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

TOLERANCES = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-9},
    torch.float32: {"rtol": 2e-3, "atol": 2e-4},
}


def derivative_chain(fn, inputs, seed=0):
    """[value, gradients, HVPs, third derivatives] of fn at inputs, along fixed directions.

    grad: d/dx <fn(x), w>; HVP: d/dx <grad, u>; third: d/dx <HVP, u'>, each for all inputs at
    once, with create_graph so the next order can follow.
    """
    generator = torch.Generator().manual_seed(seed)
    inputs = [x.detach().clone().requires_grad_() for x in inputs]

    def like(t):
        # Drawn on the CPU whatever the default device, then moved: the same directions
        # on every device.
        cpu = torch.randn(
            t.shape, generator=generator, dtype=torch.float64, device="cpu"
        )
        return cpu.to(device=t.device, dtype=t.dtype)

    out = fn(*inputs)
    chain = [(out,)]
    total = (out * like(out)).sum()
    for _ in range(3):
        if not total.requires_grad:  # no graph: every later derivative is zero
            chain.append(tuple(torch.zeros_like(x) for x in inputs))
            continue
        grads = torch.autograd.grad(total, inputs, create_graph=True, allow_unused=True)
        grads = tuple(
            torch.zeros_like(x) if g is None else g
            for g, x in zip(grads, inputs, strict=True)
        )
        chain.append(grads)
        total = sum((g * like(g)).sum() for g in grads)
    return chain


def assert_same_derivatives(fn, reference, inputs, dtype):
    inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    ours = derivative_chain(fn, inputs)
    theirs = derivative_chain(reference, inputs)
    for order, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            torch.testing.assert_close(
                x,
                y,
                **TOLERANCES[dtype],
                msg=lambda m, o=order, i=index: f"order {o}, input {i}: {m}",
            )


def math_attention(*args, **kwargs):
    """torch's MATH backend: composite ops, so autograd differentiates it to every order."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def randn(*shape, seed=0):
    return torch.randn(
        shape,
        generator=torch.Generator().manual_seed(seed),
        dtype=torch.float64,
        device="cpu",
    )


def some_false(*shape, seed=0):
    """A boolean mask with about a third False, no row fully masked."""
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.33
    keep[..., 0] = True
    return keep


def explicit_norm(difference, p):
    """The p-norm over the last dimension, in plain differentiable ops (every order)."""
    magnitude = difference.abs()
    if p == math.inf:
        return magnitude.amax(-1)
    return magnitude.pow(p).sum(-1).pow(1 / p)


def explicit_distances(x1, x2, p):
    return explicit_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)
