"""Directional derivatives to third order of a function of several tensors, for native checks.

For f(inputs) and fixed random directions: the value; the vector-Jacobian product with a
cotangent ȳ (every input's gradient); the Hessian-vector product (the gradient of ⟨grads, v⟩,
mixed terms between inputs included); and a third directional derivative (the gradient of
⟨hvp, u⟩). Every step differentiates the previous one with ``create_graph=True``, so a custom
Function and the native op it reimplements must agree on all four.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def _dot(tensors: Sequence[torch.Tensor], directions: Sequence[torch.Tensor]):
    return sum((t * d).sum() for t, d in zip(tensors, directions, strict=True))


def directional_derivatives(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], seed: int = 0
) -> list[torch.Tensor]:
    """[value, *grads, *hvps, *thirds] of ``fn(*inputs)``, each flattened, in one list."""
    generator = torch.Generator().manual_seed(seed)
    inputs = [t.detach().requires_grad_() for t in inputs]

    def like(t: torch.Tensor) -> torch.Tensor:
        return torch.randn(t.shape, generator=generator, dtype=torch.float64).to(
            t.dtype
        )

    def gradient(output, create_graph):
        # An input a derivative does not depend on (the bias, from the second order on) gets
        # zeros: that is its derivative.
        return torch.autograd.grad(output, inputs, create_graph=create_graph,
                                   allow_unused=True, materialize_grads=True)  # fmt: skip

    value = fn(*inputs)
    grads = gradient((value * like(value)).sum(), True)
    hvps = gradient(_dot(grads, [like(t) for t in inputs]), True)
    thirds = gradient(_dot(hvps, [like(t) for t in inputs]), False)
    return [value.detach(), *(t.detach() for t in (*grads, *hvps, *thirds))]


ORDER_NAMES = ("value", "gradient", "Hessian-vector product", "third derivative")


def assert_matches_native(
    ours, native, inputs, rtol: float, atol: float, orders: int = 3
) -> None:
    """Our directional derivatives equal the native op's, order by order, up to ``orders``."""
    got = directional_derivatives(ours, inputs)
    expected = directional_derivatives(native, inputs)
    count = len(inputs)
    for index, (a, b) in enumerate(zip(got, expected, strict=True)):
        order = 0 if index == 0 else 1 + (index - 1) // count
        if order > orders:
            break
        torch.testing.assert_close(
            a, b, rtol=rtol, atol=atol,
            msg=lambda m, order=order: f"{ORDER_NAMES[order]}: {m}",
        )  # fmt: skip
