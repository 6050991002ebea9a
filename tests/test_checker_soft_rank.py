"""check() decides a soft-rank Function at every size, from 100 to 1e4 elements.

``SoftRank`` is written as torchsort writes ``soft_rank(x, regularization="l2")`` (Blondel
et al., "Fast Differentiable Sorting and Ranking", 2020): the ranks are the projection of
``x / strength`` onto the permutahedron, computed with an isotonic regression (pool adjacent
violators) of the sorted values minus the hard ranks, and its backward averages the incoming
gradient over each pooled block. The function is piecewise linear: its Hessian-vector product
is zero between the kinks where the blocks change, and its mixed second-order term (the
derivative of the backward with respect to the incoming gradient) is the Jacobian itself.
``BuggySoftRank`` detaches 10% of the incoming gradient's own term: the first derivative's
value is right, the mixed term is 10% off (13% where the scores pool into blocks).

At 1e4 elements with torchsort's default strength, check() said "could not decide" for
both: the zero Hessian-vector product's gradients round differently at each shifted point
(each shift re-sorts the scores), and that noise was judged against its own size. It is
now judged against what the gradient varies by (as the first derivative's zero already
was), and both are decided.

The truth is independent of check(): the backward is linear in the incoming gradient, so
the mixed term by double backward is compared with the backward's own difference in the
incoming gradient, which is exact (plain torch).
"""

from __future__ import annotations

import pytest
import torch

from double_backward import check


def _pool_adjacent_violators(y: list[float]) -> list[int]:
    """The blocks of the nonincreasing isotonic regression of ``y`` (l2): each block's end,
    exclusive. Pool adjacent violators, as torchsort's isotonic_l2 does."""
    sums: list[float] = []
    counts: list[int] = []
    for value in y:
        sums.append(value)
        counts.append(1)
        # A block whose mean exceeds its predecessor's violates the order: pool them.
        while len(sums) > 1 and sums[-1] * counts[-2] > sums[-2] * counts[-1]:
            last_sum, last_count = sums.pop(), counts.pop()
            sums[-1] += last_sum
            counts[-1] += last_count
    ends, end = [], 0
    for count in counts:
        end += count
        ends.append(end)
    return ends


def _blocks(s: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Each sorted position's block index, row by row (a long tensor shaped like ``s``)."""
    ids = torch.empty(s.shape, dtype=torch.long)
    for row in range(s.shape[0]):
        start = 0
        for block, end in enumerate(_pool_adjacent_violators((s[row] - w).tolist())):
            ids[row, start:end] = block
            start = end
    return ids


def _block_mean(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Each element replaced by the mean of its block (differentiable in ``values``)."""
    count = ids.max() + 1
    sums = torch.zeros(values.shape[0], int(count), dtype=values.dtype)
    sums = sums.scatter_add(1, ids, values)
    sizes = torch.zeros_like(sums).scatter_add(1, ids, torch.ones_like(values))
    return (sums / sizes.clamp(min=1)).gather(1, ids)


class SoftRank(torch.autograd.Function):
    """torchsort's soft_rank(x, regularization="l2", regularization_strength=strength) for
    a 2-D input (ranks along dim 1), with a backward made of differentiable ops."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, strength: float = 1.0) -> torch.Tensor:
        n = x.shape[1]
        w = torch.arange(n, 0, -1, dtype=x.dtype)  # the hard ranks, largest first
        theta = x / strength
        s, permutation = torch.sort(theta, dim=1, descending=True)
        ids = _blocks(s, w)
        dual = _block_mean(s - w, ids)  # the isotonic regression's solution
        ranks = torch.empty_like(x).scatter_(1, permutation, s - dual)
        ctx.save_for_backward(permutation, ids)
        ctx.strength = strength
        return ranks

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        permutation, ids = ctx.saved_tensors
        sorted_grad = grad.gather(1, permutation)
        sorted_grad = sorted_grad - _block_mean(sorted_grad, ids)
        unsorted = torch.zeros_like(grad).scatter(1, permutation, sorted_grad)
        return unsorted / ctx.strength, None


class BuggySoftRank(SoftRank):
    """The same, but 10% of the incoming gradient's own term is detached from it: the first
    derivative's value is right, the mixed second-order term is about 10% off."""

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        permutation, ids = ctx.saved_tensors
        sorted_grad = grad.gather(1, permutation)
        mean = _block_mean(sorted_grad, ids)
        own = 0.9 * sorted_grad + 0.1 * sorted_grad.detach()
        unsorted = torch.zeros_like(grad).scatter(1, permutation, own - mean)
        return unsorted / ctx.strength, None


def soft_rank(x: torch.Tensor, strength: float) -> torch.Tensor:
    return SoftRank.apply(x, strength)


def buggy_soft_rank(x: torch.Tensor, strength: float) -> torch.Tensor:
    return BuggySoftRank.apply(x, strength)


#: The regularization strength by regime: torchsort's default (1.0: standard-normal scores
#: pool into one block, soft ranks are the centred scores plus the mean rank), and one that
#: pools them into blocks of about two (sorted neighbours 1.25 apart at the centre).
STRENGTHS = {"default": lambda n: 1.0, "pooled": lambda n: 2.0 / n}
SIZES = [
    *[(regime, n) for regime in STRENGTHS for n in (100, 1000)],
    ("default", 10_000),
    pytest.param("pooled", 10_000, marks=pytest.mark.large),  # 5 to 10 s each (its PAV)
]


def _inputs(n: int, regime: str, seed: int = 0) -> tuple[torch.Tensor, float]:
    """Standard-normal scores of n items, and the regime's strength."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(1, n, generator=generator, dtype=torch.float64)
    return x, STRENGTHS[regime](n)


def _mixed_term_error(fn, x: torch.Tensor, strength: float) -> float:
    """Plain torch: the mixed term (the derivative of the backward in the incoming gradient
    v, along u) by double backward, against the backward's own difference in v, which is
    exact (the backward is linear in v): 0 for a right backward, the bug's size otherwise."""
    generator = torch.Generator().manual_seed(1)
    x = x.detach().requires_grad_()
    v = torch.randn(x.shape, generator=generator, dtype=x.dtype, requires_grad=True)
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    (g,) = torch.autograd.grad(fn(x, strength), x, v, create_graph=True)
    (mixed,) = torch.autograd.grad(g, v, u)
    (g_moved,) = torch.autograd.grad(fn(x, strength), x, v.detach() + u)
    exact = g_moved - g.detach()  # J^T u: linear in v
    return float((mixed - exact).norm() / exact.norm())


def test_the_function_is_torchsort_soft_rank():
    # The definition (Blondel et al., section 3): soft ranks of strength ε are the
    # projection of x/ε onto the permutahedron of (1, ..., n). Tiny ε: the hard ranks (the
    # largest ranked n, as torchsort ranks); huge ε: every rank the mean rank, (n + 1) / 2.
    x = torch.tensor([[0.3, -1.2, 2.0, 0.1]], dtype=torch.float64)
    hard = torch.tensor([[3.0, 1.0, 4.0, 2.0]], dtype=torch.float64)  # the largest: n
    assert torch.allclose(soft_rank(x, 1e-3), hard)
    assert torch.allclose(
        soft_rank(x, 1e6), torch.full((1, 4), 2.5, dtype=torch.float64)
    )
    # The ranks always sum to n (n + 1) / 2: a projection onto the permutahedron.
    y, strength = _inputs(1000, "pooled")
    assert float(soft_rank(y, strength).sum()) == pytest.approx(1000 * 1001 / 2)


@pytest.mark.parametrize("regime", list(STRENGTHS))
def test_the_reference_says_which_is_right(regime):
    x, strength = _inputs(1000, regime)
    assert _mixed_term_error(soft_rank, x, strength) < 1e-12
    assert 0.05 < _mixed_term_error(buggy_soft_rank, x, strength) < 0.2  # 10% and 13%


@pytest.mark.parametrize(("regime", "n"), SIZES)
def test_right_soft_rank_passes(regime, n):
    x, strength = _inputs(n, regime)
    report = check(SoftRank.apply, x, strength)
    assert report.ok, str(report)


@pytest.mark.parametrize(("regime", "n"), SIZES)
def test_soft_rank_with_a_wrong_mixed_term_is_found(regime, n):
    # At 1e4 with the default strength, "could not decide" before issue 37: the zero
    # Hessian-vector product's rounding noise was its own scale.
    x, strength = _inputs(n, regime)
    assert _mixed_term_error(buggy_soft_rank, x, strength) > 0.05  # plain torch
    report = check(BuggySoftRank.apply, x, strength)
    assert not report.ok, str(report)
    assert "undecided" not in report.problem_names(), str(report)
