"""double_backward.ops.ctc_loss against torch's values, gradients and finite differences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck

from double_backward import ops

from .chains import (
    TOLERANCES,
    randn,
)

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
