"""check_model's fixes cover the CUDA kernels without a double backward (issue 28)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from double_backward.checker.model import FIXES, fix_for
from double_backward.checker.shared.cuda_fixes import CUDA_FIXES, CUDNN_RNN_EVAL_MESSAGE

# The errors as measured on an NVIDIA H200, torch 2.11.0+cu130 (issue 28's text).
MESSAGES = {
    "flash": "derivative for aten::_scaled_dot_product_flash_attention_backward is not "
    "implemented",
    "efficient": "derivative for aten::_scaled_dot_product_efficient_attention_backward is "
    "not implemented",
    "cudnn": "derivative for aten::_scaled_dot_product_cudnn_attention_backward is not "
    "implemented",
    "rnn": "the derivative for '_cudnn_rnn_backward' is not implemented. Double backwards is "
    "not supported for CuDNN RNNs",
}


def operator_named(message):
    # How an error names its operator: "aten::name" or "derivative for 'name'".
    match = re.search(r"aten::(\w+)|derivative for '(\w+)'", message)
    return "aten::" + (match.group(1) or match.group(2))


@pytest.mark.parametrize("kernel", ["flash", "efficient", "cudnn"])
def test_each_fused_attention_kernel_gets_the_math_backend_and_ops_fix(kernel):
    fix = fix_for(operator_named(MESSAGES[kernel]))
    assert "SDPBackend.MATH" in fix
    assert "double_backward.ops.scaled_dot_product_attention" in fix
    assert "double_backward.ops.replaced()" in fix


# The fused kernels' derivatives on the installed torch, without a GPU: meta tensors have
# shapes and no data, and a kernel's derivative formula is the same on every device.
FUSED_ON_META = {
    "flash": lambda q, k, v: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)[0],
    "efficient": lambda q, k, v: torch.ops.aten._scaled_dot_product_efficient_attention(
        q, k, v, None, True)[0],  # fmt: skip
    "cudnn": lambda q, k, v: torch.ops.aten._scaled_dot_product_cudnn_attention(
        q, k, v, None, True)[0],  # fmt: skip
}


def _on_meta():
    return [torch.empty(1, 2, 8, 16, device="meta", requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("kernel", sorted(FUSED_ON_META))
def test_on_the_meta_device_each_fused_kernel_raises_the_gpus_message(kernel):
    q, k, v = _on_meta()
    (grad_q,) = torch.autograd.grad(FUSED_ON_META[kernel](q, k, v).sum(), q, create_graph=True)
    assert type(grad_q.grad_fn).__name__ == "NotImplemented"  # the first backward's node
    with pytest.raises(RuntimeError) as raised:
        torch.autograd.grad(grad_q.sum(), q)
    assert str(raised.value) == MESSAGES[kernel]  # word for word as the H200 printed it
    assert "SDPBackend.MATH" in fix_for(operator_named(str(raised.value)))


def test_on_the_meta_device_the_math_backend_has_a_double_backward():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q, k, v = _on_meta()
    with sdpa_kernel(SDPBackend.MATH):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    (grad_q,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    (second,) = torch.autograd.grad(grad_q.sum(), q)
    assert second.shape == q.shape and second.device.type == "meta"


def test_cudnn_rnns_get_cudnn_off_in_train_and_eval_mode():
    for fix in (
        fix_for(operator_named(MESSAGES["rnn"])),
        FIXES[CUDNN_RNN_EVAL_MESSAGE],
    ):
        assert "torch.backends.cudnn.flags(enabled=False)" in fix
        assert "double_backward.ops.replaced()" in fix
    assert "eval mode" in FIXES[CUDNN_RNN_EVAL_MESSAGE]


def test_every_cuda_fix_is_in_fixes_and_none_overrides_a_cpu_one():
    assert all(FIXES[key] == fix for key, fix in CUDA_FIXES.items())
    assert "_scaled_dot_product_flash_attention_for_cpu" in FIXES


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_on_cuda_the_rnn_fix_works_where_cudnn_raises(mode):
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 6).cuda()
    getattr(lstm, mode)()
    x = torch.randn(5, 2, 4, device="cuda", requires_grad=True)

    def penalty():
        (grad,) = torch.autograd.grad(lstm(x)[0].square().sum(), x, create_graph=True)
        grad.square().sum().backward()

    with pytest.raises((RuntimeError, NotImplementedError), match="cudnn|_cudnn_rnn"):
        penalty()
    with torch.backends.cudnn.flags(enabled=False):
        penalty()


class _RaisesLikeCudnnRnnInEval(torch.autograd.Function):
    """A stand-in for cuDNN's RNN in eval mode on CPU: its backward raises cuDNN's message,
    which names no operator."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(CUDNN_RNN_EVAL_MESSAGE)


class _EvalRnnStandIn(nn.Module):
    def forward(self, x):
        return _RaisesLikeCudnnRnnInEval.apply(x)


def test_check_model_names_the_cudnn_eval_fix_from_the_message_alone():
    from double_backward import check_model

    model = nn.Sequential(nn.Linear(3, 3), _EvalRnnStandIn())
    report = check_model(model, torch.randn(2, 3))
    assert not report.ok
    (broken,) = report.breaks
    assert broken.fix == FIXES[CUDNN_RNN_EVAL_MESSAGE]
    assert "cuDNN RNN" in broken.op
