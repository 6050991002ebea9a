"""The broken patterns of issue 27 (checker_corpus.PATTERNS, each modelled on a real
project's Function) at 1e3 to 1e5 elements: never a pass, and the cause named right.

What is broken is established here without the checker: by a native twin's derivatives, by
calling backward twice, by looking at the incoming gradient after backward, or by the
function being flat where its backward is not zero.
"""

from __future__ import annotations

import pytest
import torch

from double_backward import check

from .checker_corpus import PATTERNS, Pattern

SIZES = [1_000, 10_000, pytest.param(100_000, marks=pytest.mark.large)]


def _inputs(pattern: Pattern, size: int):
    return pattern.inputs(size, torch.Generator().manual_seed(size))


def _pattern(pattern_id: str) -> Pattern:
    (found,) = [p for p in PATTERNS if p.id == pattern_id]
    return found


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_no_broken_pattern_passes_and_each_cause_is_named(pattern, size):
    report = check(pattern.fn, *_inputs(pattern, size))
    assert not report.ok
    assert report.problem_names() == set(pattern.problems), str(report)


def _second_order(fn, args, seed=0):
    """An HVP plus mixed term of a random weighting of fn's output, by double backward."""
    generator = torch.Generator().manual_seed(seed)
    x = args[0].detach().clone().requires_grad_()
    out = fn(x, *args[1:])
    v = torch.randn(out.shape, generator=generator, dtype=out.dtype).requires_grad_()
    (g,) = torch.autograd.grad(out, x, v, create_graph=True)
    u = torch.randn(x.shape, generator=generator, dtype=x.dtype)
    if not g.requires_grad:
        return torch.zeros_like(x), torch.zeros_like(v)
    hvp, mixed = torch.autograd.grad((g * u).sum(), (x, v), allow_unused=True,
                                     materialize_grads=True)  # fmt: skip
    return hvp, mixed


@pytest.mark.parametrize(
    "pattern_id",
    ["xformers-swiglu-saves-products", "torchsort-soft-rank-numpy",
     "qpth-lu-in-a-tuple-on-ctx"],
)  # fmt: skip
def test_the_second_derivative_differs_from_the_native_twins(pattern_id):
    pattern = _pattern(pattern_id)
    args = _inputs(pattern, 1_000)
    hvp, mixed = _second_order(pattern.fn, args)
    native_hvp, native_mixed = _second_order(pattern.native, args)
    wrong = torch.cat([hvp.reshape(-1), mixed.reshape(-1)])
    right = torch.cat([native_hvp.reshape(-1), native_mixed.reshape(-1)])
    assert float((wrong - right).norm() / right.norm()) > 0.05


def test_entmax15s_second_derivative_is_nan_where_the_twins_is_finite():
    pattern = _pattern("entmax15-nan-hvp")
    args = _inputs(pattern, 1_000)
    out = pattern.fn(args[0].clone().requires_grad_())
    assert torch.allclose(out, pattern.native(args[0]))  # the same function
    hvp, _ = _second_order(pattern.fn, args)
    native_hvp, _ = _second_order(pattern.native, args)
    assert torch.isnan(hvp).any() and torch.isfinite(native_hvp).all()


def test_heaviside_is_flat_where_its_backward_is_not_zero():
    pattern = _pattern("snntorch-heaviside-float32")
    (x,) = _inputs(pattern, 1_000)
    step = 1e-3 * float(x.abs().min())  # crosses no zero: the step function cannot move
    assert torch.equal(pattern.fn(x + step), pattern.fn(x))
    leaf = x.clone().requires_grad_()
    (grad,) = torch.autograd.grad(pattern.fn(leaf), leaf, torch.ones(x.shape))
    assert grad.abs().sum() > 0


def test_dgl_edge_softmax_raises_on_a_second_backward_and_the_report_names_the_ctx_entry():
    pattern = _pattern("dgl-edge-softmax-clears-cache")
    scores, destination, nodes = _inputs(pattern, 1_000)
    leaf = scores.clone().requires_grad_()
    out = pattern.fn(leaf, destination, nodes)
    torch.autograd.grad(out.sum(), leaf, retain_graph=True)
    with pytest.raises(TypeError):
        torch.autograd.grad(out.sum(), leaf)
    (problem,) = check(pattern.fn, scores, destination, nodes).problems
    assert problem.diagnosis.startswith(
        "backward clears state it needs (ctx.backward_cache in EdgeSoftmaxClearsCache) after "
        "one call"
    )


def test_unsloth_rope_changes_the_callers_gradient_and_the_report_says_so():
    pattern = _pattern("unsloth-rope-inplace-grad")
    q, cos, sin = _inputs(pattern, 1_000)
    leaf = q.clone().requires_grad_()
    v = torch.ones(q.shape, dtype=q.dtype)
    torch.autograd.grad(pattern.fn(leaf, cos, sin), leaf, v)
    assert not torch.equal(v, torch.ones(q.shape, dtype=q.dtype))
    (problem,) = check(pattern.fn, q, cos, sin).problems
    assert problem.diagnosis.startswith(
        "backward modified its incoming gradient in place"
    )


def test_soft_rank_blames_the_numpy_term_not_the_saved_constant():
    pattern = _pattern("torchsort-soft-rank-numpy")
    (problem,) = check(pattern.fn, *_inputs(pattern, 1_000)).problems
    assert "calls .numpy()" in problem.diagnosis
    assert "shape ()" not in problem.diagnosis  # the constant 1/strength is not named


def test_qpth_names_the_lu_factor_in_a_tuple_and_the_duals():
    pattern = _pattern("qpth-lu-in-a-tuple-on-ctx")
    (problem,) = check(pattern.fn, *_inputs(pattern, 1_000)).problems
    assert "ctx.Q_LU[0] in SolveKeepsLU" in problem.diagnosis
    assert "ctx.nus in SolveKeepsLU" in problem.diagnosis


class ScaleByConstantWeights(torch.autograd.Function):
    """x * w with w = linspace(1, 2, n) made inside forward: a constant, saved without
    history, which breaks nothing (it is no function of x)."""

    @staticmethod
    def forward(ctx, x):
        weights = torch.linspace(1, 2, x.shape[-1], dtype=x.dtype)
        ctx.save_for_backward(x, weights)
        return x**2 * weights

    @staticmethod
    def backward(ctx, grad):
        x, weights = ctx.saved_tensors
        return 2 * grad * x * weights


def test_a_constant_weight_saved_in_forward_is_not_called_an_intermediate():
    x = torch.randn(
        3, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )
    leaf = x.clone().requires_grad_()
    weights = torch.linspace(1, 2, 4, dtype=torch.float64)
    assert torch.autograd.gradgradcheck(ScaleByConstantWeights.apply, (leaf,))
    report = check(ScaleByConstantWeights.apply, x)
    assert report.ok, str(report)
    assert not any("saved tensor #1" in note for note in report.notes), report.notes
    assert torch.equal(ScaleByConstantWeights.apply(x), x**2 * weights)
