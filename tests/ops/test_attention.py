"""ops.scaled_dot_product_attention against torch's MATH backend, to the third derivative."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

import double_backward
from double_backward import ops
from double_backward.costs import load_measurements, saved_tensors
from double_backward.ops import attention

from .chains import (
    assert_same_derivatives,
    math_attention,
    randn,
    some_false,
)

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
        monkeypatch.setattr(attention, "BLOCK_ELEMENTS", 1)
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
    monkeypatch.setattr(attention, "BLOCK_ELEMENTS", 3 * 36)
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
    with pytest.raises(
        ValueError, match=r"must be one of \[.*'attention'.*\], got 'x'"
    ):
        load_measurements("x")
