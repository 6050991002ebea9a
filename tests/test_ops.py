"""double_backward.ops against torch's own reference, to the third derivative.

Each replacement is compared with a native computation that supports every order (the MATH
backend of scaled_dot_product_attention, an explicit formula for distances): the value, the
gradient of a weighted sum of the output, a Hessian-vector product and a third directional
derivative, with respect to every differentiable input at once; in float64, and in float32
with looser tolerances. gradcheck and gradgradcheck check the float64 derivatives on their own.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck
from torch.nn.attention import SDPBackend, sdpa_kernel

import double_backward
from double_backward import ops
from double_backward.costs import load_measurements, saved_tensors

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
        return torch.randn(t.shape, generator=generator, dtype=torch.float64).to(
            t.dtype
        )

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


# -- scaled_dot_product_attention ------------------------------------------------------------


def math_attention(*args, **kwargs):
    """torch's MATH backend: composite ops, so autograd differentiates it to every order."""
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(*args, **kwargs)


def randn(*shape, seed=0):
    return torch.randn(
        shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


def some_false(*shape, seed=0):
    """A boolean mask with about a third False, no row fully masked."""
    keep = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.33
    keep[..., 0] = True
    return keep


# (query, key, value, kwargs): L ≠ S, broadcast batch and heads, masks, is_causal, scale.
ATTENTION_CASES = {
    "plain": (
        (randn(2, 3, 4, 5), randn(2, 3, 6, 5, seed=1), randn(2, 3, 6, 7, seed=2)),
        {},
    ),
    "no_batch": ((randn(4, 5), randn(6, 5, seed=1), randn(6, 3, seed=2)), {}),
    "three_batch_dims": (
        (
            randn(2, 1, 2, 3, 4),
            randn(2, 3, 1, 5, 4, seed=1),
            randn(1, 3, 2, 5, 2, seed=2),
        ),
        {},
    ),
    "broadcast_batch_and_heads": (
        (randn(2, 3, 4, 5), randn(1, 3, 6, 5, seed=1), randn(2, 1, 6, 7, seed=2)),
        {},
    ),
    "bool_mask_broadcast": (
        (randn(2, 3, 4, 5), randn(2, 3, 6, 5, seed=1), randn(2, 3, 6, 7, seed=2)),
        {"attn_mask": some_false(4, 6)},
    ),
    "bool_mask_per_batch": (
        (randn(2, 3, 4, 5), randn(2, 3, 6, 5, seed=1), randn(2, 3, 6, 7, seed=2)),
        {"attn_mask": some_false(2, 1, 4, 6)},
    ),
    "additive_mask": (
        (randn(2, 3, 4, 5), randn(2, 3, 6, 5, seed=1), randn(2, 3, 6, 7, seed=2)),
        {"attn_mask": randn(3, 4, 6, seed=3)},
    ),
    "causal_l_less_than_s": (
        (randn(2, 2, 4, 5), randn(2, 2, 6, 5, seed=1), randn(2, 2, 6, 3, seed=2)),
        {"is_causal": True},
    ),
    "causal_square": (
        (randn(1, 2, 5, 4), randn(1, 2, 5, 4, seed=1), randn(1, 2, 5, 4, seed=2)),
        {"is_causal": True},
    ),
    "scale": (
        (randn(2, 4, 5), randn(2, 6, 5, seed=1), randn(2, 6, 7, seed=2)),
        {"scale": 0.3},
    ),
    "gqa": (
        (randn(1, 4, 3, 5), randn(1, 2, 6, 5, seed=1), randn(1, 2, 6, 7, seed=2)),
        {"enable_gqa": True},
    ),
}


@pytest.fixture(params=["one_block", "one_row_per_block"])
def blocks(request, monkeypatch):
    """Forward and the unrecorded backward run in blocks of queries: one, or several."""
    if request.param == "one_row_per_block":
        monkeypatch.setattr(ops, "BLOCK_ELEMENTS", 1)
    return request.param


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("case", ATTENTION_CASES)
def test_attention_matches_the_math_backend_to_the_third_derivative(
    case, dtype, blocks
):
    inputs, kwargs = ATTENTION_CASES[case]
    kwargs = {  # a float mask in the inputs' dtype
        name: value.to(dtype)
        if isinstance(value, torch.Tensor) and value.is_floating_point()
        else value
        for name, value in kwargs.items()
    }
    assert_same_derivatives(
        lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, **kwargs),
        lambda q, k, v: math_attention(q, k, v, **kwargs),
        inputs,
        dtype,
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_attention_differentiates_an_additive_mask_like_the_math_backend(dtype, blocks):
    (q, k, v), _ = ATTENTION_CASES["plain"]
    # Broadcast over batch and queries: its gradients are summed.
    mask = randn(3, 1, 6, seed=4)
    assert_same_derivatives(
        lambda q, k, v, m: ops.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda q, k, v, m: math_attention(q, k, v, attn_mask=m),
        (q, k, v, mask),
        dtype,
    )


def test_attention_in_uneven_blocks_matches_the_math_backend(monkeypatch):
    # 6 batch × 6 keys = 36 scores per query: blocks of 3 queries, then one of 1.
    monkeypatch.setattr(ops, "BLOCK_ELEMENTS", 3 * 36)
    (q, k, v), _ = ATTENTION_CASES["plain"]
    mask = randn(3, 4, 6, seed=4)
    assert_same_derivatives(
        lambda q, k, v, m: ops.scaled_dot_product_attention(q, k, v, attn_mask=m),
        lambda q, k, v, m: math_attention(q, k, v, attn_mask=m),
        (q, k, v, mask),
        torch.float64,
    )


def test_attention_passes_gradcheck_and_gradgradcheck_with_every_input_differentiable(
    blocks,
):
    (q, k, v), _ = ATTENTION_CASES["broadcast_batch_and_heads"]
    mask = randn(4, 6, seed=4)
    inputs = tuple(t.clone().requires_grad_() for t in (q, k, v, mask))

    def attention(q, k, v, m):
        return ops.scaled_dot_product_attention(q, k, v, attn_mask=m)

    assert gradcheck(attention, inputs)
    assert gradgradcheck(attention, inputs)


FULLY_MASKED = some_false(4, 6)
FULLY_MASKED[1] = False  # query 1 may look at no key


@pytest.mark.parametrize(
    "mask",
    [
        FULLY_MASKED,
        torch.zeros(4, 6, dtype=torch.float64).masked_fill(~FULLY_MASKED, -math.inf),
    ],
    ids=["bool", "additive_minus_inf"],
)
def test_a_fully_masked_query_gets_zeros_and_zero_derivatives_as_in_torch(mask, blocks):
    (q, k, v), _ = ATTENTION_CASES["plain"]
    out = ops.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out[:, :, 1].eq(0).all()
    assert out.isfinite().all()
    # torch's default CPU kernel gives the same zeros.
    torch.testing.assert_close(
        out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    )
    # Every order matches the MATH backend, which zeroes such rows (_safe_softmax).
    assert_same_derivatives(
        lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        lambda q, k, v: math_attention(q, k, v, attn_mask=mask),
        (q, k, v),
        torch.float64,
    )
    # And the masked query's gradient is exactly zero.
    q = q.clone().requires_grad_()
    (grad_q,) = torch.autograd.grad(
        ops.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum(), q
    )
    assert grad_q[:, :, 1].eq(0).all()


def test_the_default_cpu_kernel_has_no_double_backward_which_is_why_ops_exists():
    # Measured on torch 2.13 CPU: with L = S and E = Ev torch picks its flash kernel. (At
    # L ≠ S it falls back to composite ops, which do support double backward.)
    q, k, v = (randn(1, 2, 8, 8, seed=seed).float() for seed in range(3))
    q.requires_grad_()
    out = F.scaled_dot_product_attention(q, k, v)
    (grad_q,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        grad_q.sum().backward()


def test_attention_saves_no_length_by_length_matrix_unlike_the_math_backend():
    length, features = 64, 8
    q, k, v = (
        randn(1, 2, length, features),
        randn(1, 2, length, features, seed=1),
        randn(1, 2, length, features, seed=2),
    )
    # The attention probabilities, float64, 2 heads.
    matrix_bytes = 2 * length * length * 8
    ours = saved_tensors(lambda q: ops.scaled_dot_product_attention(q, k, v), q)
    theirs = saved_tensors(lambda q: math_attention(q, k, v), q)
    # Ours: k, v (2·L·d each) and the logsumexp (L per head); MATH keeps L×L matrices.
    assert ours.extra_bytes == (2 * 2 * length * features + 2 * length) * 8
    assert theirs.extra_bytes >= matrix_bytes
    assert max(saved.nbytes for saved in ours.forward) < matrix_bytes


def test_the_logsumexp_output_is_the_row_logsumexp_of_the_scores():
    (q, k, v), _ = ATTENTION_CASES["plain"]
    out, logsumexp = ops.ScaledDotProductAttention.apply(q, k, v, None, False, 0.5)
    expected = torch.logsumexp(0.5 * q @ k.transpose(-2, -1), dim=-1, keepdim=True)
    torch.testing.assert_close(logsumexp, expected)
    torch.testing.assert_close(out, math_attention(q, k, v, scale=0.5))


def test_attention_is_reachable_from_the_package():
    assert double_backward.ops is ops
    assert "ops" in dir(double_backward)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dropout_p": 0.1}, ValueError, "dropout_p must be 0.0, got 0.1"),
        (
            {"attn_mask": torch.ones(4, 6, dtype=torch.bool), "is_causal": True},
            ValueError,
            "either attn_mask or is_causal",
        ),
        (
            {"attn_mask": torch.ones(4, 6, dtype=torch.int64)},
            TypeError,
            "bool .* float32",
        ),
        (
            {"attn_mask": torch.ones(4, 6).half()},
            TypeError,
            "bool .* float32 or the query's",
        ),
        (
            {"attn_mask": [[1.0]]},
            TypeError,
            "attn_mask must be a torch.Tensor, got list",
        ),
        (
            {"attn_mask": torch.ones(5, 6)},
            ValueError,
            r"does not broadcast to \(..., L, S\)",
        ),
    ],
)
def test_attention_refuses_what_it_does_not_support_with_a_clear_error(
    kwargs, error, match
):
    q, k, v = randn(2, 3, 4, 5), randn(2, 3, 6, 5), randn(2, 3, 6, 7)
    with pytest.raises(error, match=match):
        ops.scaled_dot_product_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (
            (randn(4, 5), randn(6, 5), [1.0]),
            TypeError,
            "'value' must be a torch.Tensor",
        ),
        (
            (randn(4, 5), randn(6, 5).long(), randn(6, 2)),
            TypeError,
            "'key' must be a real",
        ),
        (
            (randn(5), randn(6, 5), randn(6, 2)),
            ValueError,
            "'query' must have at least 2",
        ),
        ((randn(4, 5), randn(6, 5).float(), randn(6, 2)), TypeError, "one dtype"),
        (
            (randn(4, 5), randn(6, 4), randn(6, 2)),
            ValueError,
            r"expected query \(..., L, E\)",
        ),
        (
            (randn(3, 5), randn(3, 5), randn(3, 2)),
            ValueError,
            "needs a heads dimension",
        ),
        (
            (randn(1, 3, 4, 5), randn(1, 2, 6, 5), randn(1, 2, 6, 7)),
            ValueError,
            "heads .3. to be a multiple of the key's",
        ),
        (
            (randn(2, 4, 5), randn(3, 6, 5), randn(3, 6, 7)),
            ValueError,
            r"batch dimensions \(2,\), \(3,\) and \(3,\) of query, key and value do not",
        ),
    ],
)
def test_attention_refuses_bad_inputs_with_a_clear_error(args, error, match):
    with pytest.raises(error, match=match):
        ops.scaled_dot_product_attention(*args, enable_gqa="head" in match)


def test_attention_accepts_a_float_mask_of_another_dtype_as_torch_does():
    (q, k, v), _ = ATTENTION_CASES["plain"]
    mask = randn(4, 6, seed=3).float()
    torch.testing.assert_close(
        ops.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        math_attention(q, k, v, attn_mask=mask),
    )


# -- cdist and pdist -------------------------------------------------------------------------

P_VALUES = [1.0, 1.5, 2.0, 3.0, math.inf]


def explicit_norm(difference, p):
    """The p-norm over the last dimension, in plain differentiable ops (every order)."""
    magnitude = difference.abs()
    if p == math.inf:
        return magnitude.amax(-1)
    return magnitude.pow(p).sum(-1).pow(1 / p)


def explicit_distances(x1, x2, p):
    return explicit_norm(x1.unsqueeze(-2) - x2.unsqueeze(-3), p)


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
            lambda: ops.cdist(randn(3, 2), randn(3, 2), 0.5),
            ValueError,
            "p must be a number >= 1",
        ),
        (lambda: ops.cdist(randn(3, 2), randn(3, 2), math.nan), ValueError, "got nan"),
        (lambda: ops.cdist(randn(3, 2), randn(3, 2), "2"), ValueError, "got '2'"),
        (lambda: ops.cdist(randn(3, 2), randn(3, 3)), ValueError, "with the same M"),
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
        (lambda: ops.pdist(randn(3, 2), -1), ValueError, "p must be a number >= 1"),
    ],
)
def test_distances_refuse_bad_input_with_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


# -- ctc_loss --------------------------------------------------------------------------------


def ctc_problem(dtype=torch.float64):
    """Logits (T=8, N=3, C=5), targets with a repeated label, and a batch element with none."""
    logits = randn(8, 3, 5, seed=5).to(dtype)
    targets = torch.tensor([[1, 1, 3, 2], [4, 2, 0, 0], [0, 0, 0, 0]])
    return logits, targets, torch.tensor([8, 6, 7]), torch.tensor([4, 2, 0])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_ctc_loss_value_and_gradient_match_torchs(reduction, dtype):
    logits, targets, input_lengths, target_lengths = ctc_problem(dtype)
    values, grads = [], []
    for loss_fn in (ops.ctc_loss, F.ctc_loss):
        x = logits.clone().requires_grad_()
        loss = loss_fn(x.log_softmax(-1), targets, input_lengths, target_lengths,
                       reduction=reduction)  # fmt: skip
        # Through log_softmax, where both gradient conventions agree (see the docstring).
        grads.append(torch.autograd.grad(loss.sum(), x)[0])
        values.append(loss)
    torch.testing.assert_close(values[0], values[1], **TOLERANCES[dtype])
    torch.testing.assert_close(grads[0], grads[1], **TOLERANCES[dtype])


def test_ctc_loss_takes_concatenated_targets_and_unbatched_input_like_torch():
    logits, targets, input_lengths, target_lengths = ctc_problem()
    log_probs = logits.log_softmax(-1)
    concatenated = torch.cat(
        [row[:n] for row, n in zip(targets, target_lengths, strict=True)]
    )
    torch.testing.assert_close(
        ops.ctc_loss(log_probs, concatenated, input_lengths, target_lengths),
        F.ctc_loss(log_probs, concatenated, input_lengths, target_lengths),
    )
    torch.testing.assert_close(
        ops.ctc_loss(log_probs[:, 0], targets[0], 8, 4, reduction="none"),
        F.ctc_loss(log_probs[:, 0], targets[0], torch.tensor(8), torch.tensor(4),
                   reduction="none"),
    )  # fmt: skip


@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss_of_an_impossible_alignment_is_torchs(zero_infinity):
    logits, targets, _, target_lengths = ctc_problem()
    too_short = torch.tensor([3, 6, 7])  # 4 labels with a repeat need at least 5 steps
    x = logits.clone().requires_grad_()
    ours = ops.ctc_loss(x.log_softmax(-1), targets, too_short, target_lengths,
                        reduction="none", zero_infinity=zero_infinity)  # fmt: skip
    theirs = F.ctc_loss(x.log_softmax(-1), targets, too_short, target_lengths,
                        reduction="none", zero_infinity=zero_infinity)  # fmt: skip
    torch.testing.assert_close(ours, theirs)
    if zero_infinity:  # torch: a zero loss with a zero gradient
        (grad,) = torch.autograd.grad(ours.sum(), x)
        assert grad[:, 0].eq(0).all() and grad.isfinite().all()


def test_ctc_loss_hessian_vector_product_matches_differences_of_torchs_gradient():
    # torch's gradient is right to first order; central differences of it give the HVP.
    logits, targets, input_lengths, target_lengths = ctc_problem()
    direction = randn(*logits.shape, seed=6)

    def gradient(fn, x, create_graph=False):
        x = x.detach().requires_grad_()
        loss = fn(x.log_softmax(-1), targets, input_lengths, target_lengths)
        return x, torch.autograd.grad(loss, x, create_graph=create_graph)[0]

    x, grad = gradient(ops.ctc_loss, logits, create_graph=True)
    (hvp,) = torch.autograd.grad((grad * direction).sum(), x)
    step = 1e-5
    expected = (
        gradient(F.ctc_loss, logits + step * direction)[1]
        - gradient(F.ctc_loss, logits - step * direction)[1]
    ) / (2 * step)
    torch.testing.assert_close(hvp, expected, rtol=1e-5, atol=1e-7)


def test_ctc_loss_passes_gradcheck_and_gradgradcheck_where_torchs_has_no_second_order():
    logits, targets, input_lengths, target_lengths = ctc_problem()
    x = logits[:5].clone().requires_grad_()  # T = 5 keeps gradgradcheck quick
    lengths = (torch.tensor([5, 5, 4]), target_lengths)

    def loss(x):
        return ops.ctc_loss(x.log_softmax(-1), targets, *lengths, reduction="sum")

    assert gradcheck(loss, (x,))
    assert gradgradcheck(loss, (x,))
    native = F.ctc_loss(x.log_softmax(-1), targets, *lengths, reduction="sum")
    (grad,) = torch.autograd.grad(native, x, create_graph=True)
    with pytest.raises(RuntimeError, match="_ctc_loss_backward is not implemented"):
        torch.autograd.grad(grad.square().sum(), x)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"reduction": "max"}, ValueError, "reduction must be 'none', 'sum' or 'mean'"),
        ({"blank": 5}, ValueError, r"blank must be a class index in \[0, 5\)"),
        (
            {"input_lengths": [8, 9, 7]},
            ValueError,
            "input_lengths must be between 1 and T",
        ),
        ({"input_lengths": [8, 6]}, ValueError, "one length per batch element"),
        ({"target_lengths": [5, 2, 0]}, ValueError, "do not hold target_lengths"),
        ({"log_probs": torch.zeros(8)}, ValueError, r"\(T, N, C\) or \(T, C\)"),
        ({"log_probs": torch.zeros(8, 3, 5).long()}, TypeError, "floating-point"),
        ({"log_probs": torch.zeros(8, 3, 5).half()}, TypeError, "float32 or float64"),
    ],
)
def test_ctc_loss_refuses_bad_input_with_a_clear_error(kwargs, error, match):
    logits, targets, input_lengths, target_lengths = ctc_problem()
    arguments = {
        "log_probs": logits.log_softmax(-1),
        "targets": targets,
        "input_lengths": input_lengths,
        "target_lengths": target_lengths,
        **kwargs,
    }
    with pytest.raises(error, match=match):
        ops.ctc_loss(**arguments)


# -- The committed attention measurements ----------------------------------------------------


def test_the_committed_attention_measurements_are_at_the_issues_shape_and_targets():
    measurements = load_measurements("attention")
    settings = measurements["settings"]
    shape = [settings[key] for key in ("batch", "heads", "length", "source_length")]
    assert shape == [2, 8, 1024, 1024]
    assert (settings["features"], settings["dtype"], settings["threads"]) == (
        64,
        "float32",
        1,
    )
    assert settings["rounds"] >= 11
    bounds = {row["target"]: row["at_most"] for row in measurements["targets"]}
    assert bounds == {
        "extra_saved": 0.01,
        "forward_backward": 1.3,
        "gradient_penalty": 1.5,
    }
    for row in measurements["targets"]:
        assert row["met"] == (row["ratio"] <= row["at_most"])
    saved = measurements["saved"]
    ratio = saved["custom"]["extra_bytes"] / saved["native"]["extra_bytes"]
    assert ratio == next(
        row["ratio"]
        for row in measurements["targets"]
        if row["target"] == "extra_saved"
    )


def test_load_measurements_refuses_an_unknown_name():
    with pytest.raises(ValueError, match=r"must be one of \[.*'attention'.*\], got 'x'"):
        load_measurements("x")
