"""The checker at every size: broken Functions found from 40 to 1e6 elements, correct ones
passed, and the detection bound of the random directions measured.

Each expected verdict is established here without the checker: the broken Function's
Hessian-vector product (or its backward at -v) is compared with the native twin's along one
random direction, which costs O(n) at any size. The 1e5 and 1e6 sizes run for one Function
only (marked ``large``: ``pytest -m "not large"`` skips them while iterating).
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.checker_cases import (
    ERROR,
    CubeWithHvpError,
    RMSNormRecompute,
    RMSNormSavesRstd,
    misses,
    rms_norm,
)
from double_backward import check
from double_backward.checker.function import evidence
from double_backward.functions import failures

from .checker_corpus import LayerNormSavesStats, LowerBound, ReLUMask

SIZES = [40, 1_000, 10_000]
LARGE = [pytest.param(size, marks=pytest.mark.large) for size in (100_000, 1_000_000)]


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)  # fmt: skip


def _hvp(fn, inputs, v, u):
    """The Hessian-vector product of vᵀ fn(inputs) along u (double backward of ``fn``)."""
    x = inputs[0].detach().requires_grad_()
    (grad,) = torch.autograd.grad(fn(x, *inputs[1:]), x, v, create_graph=True)
    if not grad.requires_grad:  # no graph: the second derivative comes out as zero
        return torch.zeros_like(x)
    (hvp,) = torch.autograd.grad(grad, x, u)
    return hvp


def _relative_hvp_error(fn, native, inputs):
    v, u = _randn(*inputs[0].shape, seed=1), _randn(*inputs[0].shape, seed=2)
    wrong, right = _hvp(fn, inputs, v, u), _hvp(native, inputs, v, u)
    return float((wrong - right).norm() / right.norm())


def _rms_inputs(size):
    width = 10 if size < 1000 else 100
    return (_randn(size // width, width), torch.rand(width, dtype=torch.float64) + 0.5, 1e-6)


@pytest.mark.parametrize("size", [*SIZES, *LARGE])
def test_an_rms_norm_saving_rstd_is_caught_at_every_size(size):
    inputs = _rms_inputs(size)
    assert _relative_hvp_error(RMSNormSavesRstd.apply, rms_norm, inputs) > 0.05  # independent
    report = check(RMSNormSavesRstd.apply, *inputs)
    assert report.problem_names() == {"saved-intermediate"}, str(report)


@pytest.mark.parametrize("size", SIZES)
def test_a_saved_intermediate_and_saved_statistics_are_caught_at_every_size(size):
    x = _randn(size)
    assert _relative_hvp_error(failures.SinhSavesIntermediate.apply, torch.sinh, (x,)) > 0.05
    assert check(failures.SinhSavesIntermediate.apply, x).problem_names() == {
        "saved-intermediate"
    }
    rows = _randn(max(1, size // 20), 20)
    layer_norm = torch.nn.functional.layer_norm
    native = lambda t: layer_norm(t, (20,))  # noqa: E731
    assert _relative_hvp_error(LayerNormSavesStats.apply, native, (rows,)) > 0.05
    assert check(LayerNormSavesStats.apply, rows).problem_names() == {"saved-intermediate"}


@pytest.mark.parametrize("size", SIZES)
def test_a_backward_not_linear_in_grad_out_is_caught_at_every_size(size):
    x, bound = _randn(size), torch.tensor(0.1, dtype=torch.float64)
    v = _randn(size, seed=1)
    leaf = x.clone().requires_grad_()
    out = LowerBound.apply(leaf, bound)
    (plus,) = torch.autograd.grad(out, leaf, v, retain_graph=True)
    (minus,) = torch.autograd.grad(out, leaf, -v)
    assert not torch.allclose(plus, -minus)  # independent: backward(-v) != -backward(v)
    report = check(LowerBound.apply, x, bound, wrt=0)
    assert report.problem_names() == {"backward-not-linear"}, str(report)


@pytest.mark.parametrize("size", [10_000, pytest.param(1_000_000, marks=pytest.mark.large)])
def test_correct_functions_pass_at_scale_even_with_kinks(size):
    assert check(RMSNormRecompute.apply, *_rms_inputs(size)).ok
    # A ReLU at 1e6 elements: some directions cross a kink; they are left out, not failed.
    report = check(ReLUMask.apply, _randn(size))
    assert report.ok, str(report)


def test_no_jacobian_is_built_above_the_limit(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("gradcheck called above the Jacobian limit")

    monkeypatch.setattr(evidence, "gradcheck", refuse)
    monkeypatch.setattr(evidence, "gradgradcheck", refuse)
    report = check(LayerNormSavesStats.apply, _randn(100, 100))
    assert report.problem_names() == {"saved-intermediate"}
    assert "relative error" in report.problems[0].diagnosis  # directional evidence
    assert "random signed directions" in report.problems[0].diagnosis


# -- the detection bound -----------------------------------------------------------------------


def test_the_planted_error_is_five_percent_of_the_hessian():
    x, v = _randn(1000), _randn(1000, seed=1)
    basis = torch.zeros(1000, dtype=torch.float64)
    basis[0] = 1
    cube = lambda t: t**3  # noqa: E731
    difference = _hvp(CubeWithHvpError.apply, (x,), v, basis) - _hvp(cube, (x,), v, basis)
    hessian_norm = (6 * x * v).norm()  # the Hessian of vᵀx³ is diag(6xv)
    assert float(difference[0] / hessian_norm) == pytest.approx(ERROR)
    assert float(difference[1:].abs().max()) == 0


def test_one_direction_misses_a_five_percent_error_about_as_often_as_derived():
    # Derived on plot_16c: P(miss) <= sqrt(2/pi) * tolerance / error = 0.016 per direction.
    # Over 300 trials that is 4.8 misses expected; 15 or more has probability < 1e-4.
    assert misses(directions=1, trials=300) < 15


def test_the_default_two_directions_miss_it_at_most_once_in_three_hundred():
    # Derived: 0.016 ** 2 = 2.5e-4 per check; P(2 or more misses in 300) < 3e-3.
    assert misses(directions=2, trials=300) <= 1
