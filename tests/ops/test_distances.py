"""ops.cdist and pdist against explicit formulas and torch, to the third derivative."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from double_backward import ops

from .chains import (
    assert_same_derivatives,
    derivative_chain,
    explicit_distances,
    explicit_norm,
    randn,
)

# -- cdist and pdist -------------------------------------------------------------------------

P_VALUES = [1.0, 1.5, 2.0, 3.0, math.inf]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("p", P_VALUES)
def test_cdist_matches_the_explicit_formula_to_the_third_derivative(p, dtype):
    # Random points: no coordinate differences of 0, no ties for the ∞-norm's maximum.
    x1, x2 = randn(2, 1, 4, 3), randn(3, 5, 3, seed=1)  # batch dimensions broadcast
    assert_same_derivatives(
        lambda a, b: ops.cdist(a, b, p),
        lambda a, b: explicit_distances(a, b, p),
        (x1, x2),
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_cdist_matches_torchs_matrix_product_mode_to_the_third_derivative(dtype):
    # The native route that has a double backward (for p = 2, at 30 rows, batched).
    x1, x2 = randn(2, 30, 3), randn(2, 27, 3, seed=1)
    assert_same_derivatives(
        lambda a, b: ops.cdist(a, b),
        lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
        (x1, x2),
        dtype,
    )


# torch 2.14.1 differentiates _cdist_backward and _pdist_backward, 2.13 does not (measured on
# the CPU by the built-ins scan, docs/_data/builtins/).
TORCH_DIFFERENTIATES_DISTANCES = tuple(
    int(part) for part in torch.__version__.split("+")[0].split(".")[:2]
) >= (2, 14)


@pytest.mark.parametrize("rows", [5, 25, 26, 40])
def test_cdist_has_a_second_derivative_at_every_size_unlike_torchs(rows):
    x1, x2 = randn(rows, 3).requires_grad_(), randn(rows, 3, seed=1)
    (grad,) = torch.autograd.grad(ops.cdist(x1, x2).sum(), x1, create_graph=True)
    (hvp,) = torch.autograd.grad(grad.square().sum(), x1)
    assert hvp.isfinite().all()
    # torch 2.13's default has none below 26 rows (measured on the CPU).
    (native_grad,) = torch.autograd.grad(
        torch.cdist(x1, x2).sum(), x1, create_graph=True
    )
    if rows < 26 and not TORCH_DIFFERENTIATES_DISTANCES:
        with pytest.raises(RuntimeError, match="_cdist_backward"):
            torch.autograd.grad(native_grad.square().sum(), x1)
    else:
        (native_hvp,) = torch.autograd.grad(native_grad.square().sum(), x1)
        torch.testing.assert_close(hvp, native_hvp)


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist_passes_gradcheck_and_gradgradcheck(p):
    x1 = randn(2, 4, 3).requires_grad_()
    x2 = randn(2, 3, 3, seed=1).requires_grad_()
    assert gradcheck(lambda a, b: ops.cdist(a, b, p), (x1, x2))
    assert gradgradcheck(lambda a, b: ops.cdist(a, b, p), (x1, x2))


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist_at_coincident_points_has_zero_derivatives_of_every_order(p):
    x1 = randn(4, 3)
    x2 = randn(5, 3, seed=1)
    x2[2] = x1[1]  # points 1 of x1 and 2 of x2 coincide
    x2[4] = x1[3]
    # Other pairs: the explicit formula, with the coincident pairs' distances left out.
    pairs = torch.ones(4, 5, dtype=torch.bool)
    pairs[1, 2] = pairs[3, 4] = False

    def elsewhere(a, b):
        # A coincident pair's difference replaced by ones: no 0^(1/p), no nan gradient.
        difference = a.unsqueeze(-2) - b.unsqueeze(-3)
        difference = torch.where(
            pairs.unsqueeze(-1), difference, torch.ones_like(difference)
        )
        return explicit_norm(difference, p) * pairs

    chain = derivative_chain(lambda a, b: ops.cdist(a, b, p), (x1, x2))
    expected = derivative_chain(elsewhere, (x1, x2))
    for ours, theirs in zip(chain[1:], expected[1:], strict=True):
        for a, b in zip(ours, theirs, strict=True):
            assert a.isfinite().all()
            torch.testing.assert_close(a, b)
    # The first order is torch's own choice too.
    a = x1.clone().requires_grad_()
    (native,) = torch.autograd.grad(torch.cdist(a, x2, p=p).sum(), a)
    (ours,) = torch.autograd.grad(ops.cdist(a, x2, p).sum(), a)
    torch.testing.assert_close(ours, native)


def test_cdist_of_a_point_with_itself_has_a_zero_gradient_and_hessian():
    x = torch.tensor([[0.5, -1.0]], dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(ops.cdist(x, x.detach()).sum(), x, create_graph=True)
    (hessian_row,) = torch.autograd.grad(grad[0, 0], x)
    assert grad.eq(0).all()
    assert hessian_row.eq(0).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, math.inf])
def test_pdist_matches_the_explicit_formula_to_the_third_derivative(p, dtype):
    rows, columns = torch.triu_indices(6, 6, offset=1)
    assert_same_derivatives(
        lambda x: ops.pdist(x, p),
        lambda x: explicit_norm(x[rows] - x[columns], p),
        (randn(6, 3),),
        dtype,
    )


def test_pdist_values_are_torchs_and_torchs_has_no_double_backward():
    x = randn(6, 3).requires_grad_()
    torch.testing.assert_close(ops.pdist(x, 3.0), F.pdist(x, 3.0))
    (native_grad,) = torch.autograd.grad(F.pdist(x).sum(), x, create_graph=True)
    if TORCH_DIFFERENTIATES_DISTANCES:
        (grad,) = torch.autograd.grad(ops.pdist(x).sum(), x, create_graph=True)
        torch.testing.assert_close(
            torch.autograd.grad(grad.square().sum(), x)[0],
            torch.autograd.grad(native_grad.square().sum(), x)[0],
        )
    else:
        with pytest.raises(RuntimeError, match="not implemented"):
            torch.autograd.grad(native_grad.sum(), x)
    assert gradgradcheck(ops.pdist, (x,))


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (
            lambda: ops.cdist(randn(3, 2), randn(3, 2), -0.5),
            ValueError,
            "p must be a number >= 0 or math.inf, as torch takes, got -0.5",
        ),
        (lambda: ops.cdist(randn(3, 2), randn(3, 2), math.nan), ValueError, "got nan"),
        (lambda: ops.cdist(randn(3, 2), randn(3, 2), "2"), ValueError, "got '2'"),
        (lambda: ops.cdist(randn(3, 2), randn(3, 3)), ValueError, "with the same M"),
        (
            lambda: ops.cdist(randn(3, 2), randn(3, 2), compute_mode=None),
            ValueError,
            "compute_mode must be one of",
        ),
        (lambda: ops.cdist(randn(3), randn(3, 3)), ValueError, r"x1 \(..., P, M\)"),
        (lambda: ops.cdist(randn(3, 2), randn(3, 2).float()), TypeError, "one dtype"),
        (
            lambda: ops.cdist(randn(2, 3, 2), randn(3, 3, 2)),
            ValueError,
            "do not broadcast",
        ),
        (
            lambda: ops.cdist([1.0], randn(3, 2)),
            TypeError,
            "'x1' must be a torch.Tensor",
        ),
        (lambda: ops.pdist(randn(2, 3, 2)), ValueError, r"must be 2-D \(N, M\)"),
        (lambda: ops.pdist(randn(3, 2), -1), ValueError, "p must be a number >= 0"),
    ],
)
def test_distances_refuse_bad_input_with_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- p below 1, as torch.cdist takes it --------------------------------------------------------

BELOW_ONE = [0.0, 0.3, 0.5, 0.9]


def points_with_ties():
    """x1 (4, 3), x2 (5, 3): one coincident pair, and one pair that shares a coordinate."""
    x1, x2 = randn(4, 3), randn(5, 3, seed=1)
    x2[2] = x1[1]  # distance 0
    x2[0, 1] = x1[3, 1]  # one coordinate difference of 0
    return x1, x2


@pytest.mark.parametrize("p", BELOW_ONE)
def test_cdist_below_one_has_torchs_values_and_gradients(p):
    x1, x2 = points_with_ties()
    a, b = x1.clone().requires_grad_(), x2.clone().requires_grad_()
    weights = randn(4, 5, seed=2)
    ours = ops.cdist(a, b, p)
    theirs = torch.cdist(a, b, p=p)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(
        torch.autograd.grad((ours * weights).sum(), (a, b)),
        torch.autograd.grad((theirs * weights).sum(), (a, b)),
    )


@pytest.mark.parametrize("p", BELOW_ONE)
def test_pdist_below_one_has_torchs_values_and_gradients(p):
    x = randn(6, 3).requires_grad_()
    torch.testing.assert_close(ops.pdist(x, p), F.pdist(x, p))
    torch.testing.assert_close(
        torch.autograd.grad(ops.pdist(x, p).square().sum(), x)[0],
        torch.autograd.grad(F.pdist(x, p).square().sum(), x)[0],
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
def test_cdist_below_one_matches_the_composed_formula_to_the_third_derivative(p, dtype):
    # (Σ|δ|^p)^(1/p) in plain ops, away from zero differences, where it is differentiable.
    x1, x2 = randn(2, 1, 4, 3), randn(3, 5, 3, seed=1)
    assert_same_derivatives(
        lambda a, b: ops.cdist(a, b, p),
        lambda a, b: explicit_distances(a, b, p),
        (x1, x2),
        dtype,
    )


@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
def test_cdist_below_one_passes_gradcheck_and_gradgradcheck(p):
    x1 = randn(2, 4, 3).requires_grad_()
    x2 = randn(2, 3, 3, seed=1).requires_grad_()
    assert gradcheck(lambda a, b: ops.cdist(a, b, p), (x1, x2))
    assert gradgradcheck(lambda a, b: ops.cdist(a, b, p), (x1, x2))


def test_cdist_with_p_zero_counts_differences_and_every_derivative_is_zero():
    x1, x2 = points_with_ties()
    distances = ops.cdist(x1, x2, 0.0)
    # Counted in plain torch: the coordinates that differ.
    expected = (x1.unsqueeze(-2) != x2.unsqueeze(-3)).sum(-1).to(x1.dtype)
    torch.testing.assert_close(distances, expected)
    assert distances[1, 2] == 0 and distances[3, 0] == 2
    chain = derivative_chain(lambda a, b: ops.cdist(a, b, 0.0), (x1, x2))
    for derivatives in chain[1:]:
        for derivative in derivatives:
            assert derivative.eq(0).all()


@pytest.mark.parametrize("p", [0.3, 0.5, 0.9])
def test_cdist_below_one_gives_zero_where_a_coordinate_difference_is_zero(p):
    # There the true derivative is infinite; torch's cdist and this one take 0 for that
    # coordinate, and every higher derivative stays finite.
    x1, x2 = points_with_ties()
    chain = derivative_chain(lambda a, b: ops.cdist(a, b, p), (x1, x2))
    for derivatives in chain[1:]:
        for derivative in derivatives:
            assert derivative.isfinite().all()
    a = x1.clone().requires_grad_()
    (grad,) = torch.autograd.grad(ops.cdist(a, x2, p)[3, 0], a)
    assert grad[3, 1] == 0
    assert grad[3, 0] != 0


@pytest.mark.parametrize(
    "mode",
    [
        "use_mm_for_euclid_dist_if_necessary",
        "use_mm_for_euclid_dist",
        "donot_use_mm_for_euclid_dist",
    ],
)
def test_cdist_takes_torchs_compute_modes_with_torchs_values(mode):
    x1, x2 = randn(30, 3), randn(27, 3, seed=1)
    torch.testing.assert_close(
        ops.cdist(x1, x2, compute_mode=mode), torch.cdist(x1, x2, compute_mode=mode)
    )
