"""Every tensor the ops make comes from an input: the meta-device test.

Under ``torch.set_default_device("meta")`` a tensor made without an input's device lands on
``meta``, and mixing it with the CPU inputs fails, as a CPU-made tensor fails next to CUDA
inputs. So each op, and its first, second and third derivatives, runs here with CPU inputs
under that default, and must give exactly what it gives without it. This covers the CUDA code
paths on a machine without a GPU (issue 28).
"""

from __future__ import annotations

import math

import pytest
import torch

from double_backward import ops

from .chains import derivative_chain, randn, some_false


def ctc(logits):
    targets = torch.tensor([[1, 1, 3, 2], [4, 2, 0, 0], [0, 0, 0, 0]], device="cpu")
    # Lengths as Python lists: the op makes their tensors itself.
    return ops.ctc_loss(logits.log_softmax(-1), targets, [8, 6, 7], [4, 2, 0])


def attention(**kwargs):
    return lambda q, k, v: ops.scaled_dot_product_attention(q, k, v, **kwargs)


QKV = (randn(2, 3, 4, 5), randn(2, 3, 6, 5, seed=1), randn(2, 3, 6, 7, seed=2))
CASES = {
    "attention": (attention(), QKV),
    "attention_causal": (attention(is_causal=True), QKV),
    "attention_bool_mask": (attention(attn_mask=some_false(4, 6)), QKV),
    "attention_float_mask": (
        lambda q, k, v, m: ops.scaled_dot_product_attention(q, k, v, attn_mask=m),
        (*QKV, randn(3, 4, 6, seed=3)),
    ),
    "attention_gqa": (
        attention(enable_gqa=True),
        (randn(1, 4, 3, 5), randn(1, 2, 6, 5, seed=1), randn(1, 2, 6, 7, seed=2)),
    ),
    **{
        f"cdist_p{p}": (
            lambda a, b, p=p: ops.cdist(a, b, p),
            (randn(4, 3), randn(5, 3, seed=1)),
        )
        for p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, math.inf)
    },
    "pdist": (ops.pdist, (randn(6, 3),)),
    "ctc_loss": (ctc, (randn(8, 3, 5, seed=5),)),
}


@pytest.fixture(params=["one_block", "one_row_per_block"])
def blocks(request, monkeypatch):
    if request.param == "one_row_per_block":
        monkeypatch.setattr(ops.attention, "BLOCK_ELEMENTS", 1)


@pytest.mark.parametrize("case", CASES)
def test_the_op_and_three_derivatives_make_nothing_on_the_default_device(case, blocks):
    fn, inputs = CASES[case]
    expected = derivative_chain(fn, inputs)
    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        chain = derivative_chain(fn, inputs)
    finally:
        torch.set_default_device(previous)
    for order, (ours, theirs) in enumerate(zip(chain, expected, strict=True)):
        for a, b in zip(ours, theirs, strict=True):
            assert a.device.type == "cpu", f"order {order} landed on {a.device}"
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_meta_device_test_catches_a_tensor_made_without_the_inputs_device():
    # The bug class it guards against: a helper that makes a tensor on the default device.
    def careless(x):
        return x + torch.ones(x.shape, dtype=x.dtype)

    previous = torch.get_default_device()
    torch.set_default_device("meta")
    try:
        with pytest.raises((RuntimeError, NotImplementedError), match="meta|device"):
            careless(randn(3)).sum().item()
    finally:
        torch.set_default_device(previous)
