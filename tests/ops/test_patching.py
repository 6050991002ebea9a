"""ops.replaced(): the models readers have pass a gradient penalty, and torch is restored."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from double_backward import ops

from .chains import randn

TORCH_RELEASE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

# What replaced() sets, read from torch itself (not from the code under test).
PATCHED = [
    (F, "scaled_dot_product_attention"),
    (torch, "cdist"),
    (F, "pdist"),
    (torch, "pdist"),
    (F, "ctc_loss"),
    (nn.RNN, "forward"),
    (nn.LSTM, "forward"),
    (nn.GRU, "forward"),
]


def current():
    return [getattr(owner, name) for owner, name in PATCHED]


def penalty(model, x):
    """A gradient penalty: the loss plus the squared gradient with respect to the input."""
    x = x.detach().requires_grad_()
    out = model(x)
    # Fixed weights: a mean of squares of a LayerNorm's output is constant.
    weights = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=out.device)
    loss = (out * weights.reshape(out.shape)).square().sum()
    (grad_x,) = torch.autograd.grad(loss, x, create_graph=True)
    total = loss + grad_x.square().sum()
    parameters = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(total, parameters, allow_unused=True)
    # (A transformers model's word embeddings are unused when it is given embeddings.)
    return total.detach(), [g for g in grads if g is not None]


def transformer_encoder(device="cpu"):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        16, 2, dim_feedforward=32, dropout=0.0, batch_first=True
    )
    return (
        nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).double().to(device)
    )


# -- what it patches, and that it restores it ---------------------------------------------------


def test_it_replaces_each_function_and_restores_exactly_the_same_objects():
    before = current()
    with ops.replaced():
        inside = current()
        assert F.scaled_dot_product_attention is ops.scaled_dot_product_attention
        assert F.pdist is ops.pdist and torch.pdist is ops.pdist
        assert F.ctc_loss is ops.ctc_loss
    for was, now, replacement in zip(before, current(), inside, strict=True):
        assert now is was
        assert replacement is not was


def test_it_restores_when_the_block_raises():
    before = current()
    enabled = torch.backends.cudnn.enabled
    with pytest.raises(KeyError, match="inside"), ops.replaced():
        raise KeyError("inside")
    assert all(now is was for now, was in zip(current(), before, strict=True))
    assert torch.backends.cudnn.enabled is enabled


def test_blocks_nest_and_only_the_outermost_restores():
    before = current()
    with ops.replaced():
        outer = current()
        with ops.replaced():
            assert all(a is b for a, b in zip(current(), outer, strict=True))
        # Still replaced after the inner block.
        assert all(a is b for a, b in zip(current(), outer, strict=True))
    assert all(a is b for a, b in zip(current(), before, strict=True))


def test_a_name_bound_before_the_block_keeps_the_torch_function():
    from torch.nn.functional import scaled_dot_product_attention as bound_early

    with ops.replaced():
        assert bound_early is not F.scaled_dot_product_attention
    # And it has no double backward on the CPU (flash kernel, torch 2.13).
    q = randn(1, 2, 8, 8).float().requires_grad_()
    with ops.replaced():
        out = bound_early(q, q.detach(), q.detach())
    (grad,) = torch.autograd.grad(out.square().sum(), q, create_graph=True)
    with pytest.raises(RuntimeError, match="not implemented"):
        grad.sum().backward()


def test_torch_cdist_keeps_its_signature_and_refuses_a_bad_compute_mode():
    x1, x2 = randn(5, 3), randn(4, 3, seed=1)
    with ops.replaced():
        for mode in (
            "use_mm_for_euclid_dist_if_necessary",
            "use_mm_for_euclid_dist",
            "donot_use_mm_for_euclid_dist",
        ):
            torch.testing.assert_close(
                torch.cdist(x1, x2, p=2.0, compute_mode=mode), ops.cdist(x1, x2)
            )
        with pytest.raises(ValueError, match="compute_mode must be one of"):
            torch.cdist(x1, x2, compute_mode="fast")


# -- the models ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_a_transformer_encoder_passes_a_gradient_penalty_with_maths_values(mode):
    model = transformer_encoder()
    getattr(model, mode)()
    x = randn(2, 5, 16, seed=1)
    # Without it, torch 2.13's default CPU kernel (flash attention) raises.
    with pytest.raises(RuntimeError, match="_scaled_dot_product_flash_attention"):
        penalty(model, x)
    with ops.replaced():
        value, grads = penalty(model, x)
    with sdpa_kernel(SDPBackend.MATH):
        expected_value, expected_grads = penalty(model, x)
    torch.testing.assert_close(value, expected_value)
    torch.testing.assert_close(grads, expected_grads)


def test_nn_multihead_attention_without_weights_passes_too():
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(8, 2, batch_first=True).double()

    def model(x):
        return attention(x, x, x, need_weights=False)[0]

    x = randn(2, 4, 8)
    with ops.replaced():
        value, _ = penalty(_Wrap(model, attention), x)
    with sdpa_kernel(SDPBackend.MATH):
        expected, _ = penalty(_Wrap(model, attention), x)
    torch.testing.assert_close(value, expected)


class _Wrap(nn.Module):
    def __init__(self, fn, module):
        super().__init__()
        self.fn, self.module = fn, module

    def forward(self, x):
        return self.fn(x)


class _CudnnSpy:
    """Stands in for torch's _VF in nn.modules.rnn: records cuDNN's flag at each RNN call."""

    def __init__(self, vf):
        self.vf, self.seen = vf, []

    def __getattr__(self, name):
        function = getattr(self.vf, name)
        if name not in ("lstm", "gru", "rnn_tanh", "rnn_relu"):
            return function

        def call(*args, **kwargs):
            self.seen.append((name, torch.backends.cudnn.enabled))
            return function(*args, **kwargs)

        return call


@pytest.mark.parametrize("kind", [nn.LSTM, nn.GRU, nn.RNN])
def test_rnns_run_with_cudnn_off_inside_and_on_elsewhere(kind, monkeypatch):
    spy = _CudnnSpy(torch.nn.modules.rnn._VF)
    monkeypatch.setattr(torch.nn.modules.rnn, "_VF", spy)
    torch.manual_seed(0)
    rnn = kind(4, 6, batch_first=True).double()

    def model(x):
        return rnn(x)[0]

    x = randn(2, 5, 4)
    enabled = torch.backends.cudnn.enabled
    value, grads = penalty(_Wrap(model, rnn), x)  # the CPU kernels work without it
    with ops.replaced():
        inside_value, inside_grads = penalty(_Wrap(model, rnn), x)
        conv = nn.Conv1d(1, 1, 3).double()
        seen_by_conv = []
        conv.register_forward_hook(
            lambda *_: seen_by_conv.append(torch.backends.cudnn.enabled)
        )
        conv(randn(1, 1, 5))
    assert [flag for _, flag in spy.seen] == [enabled, False]
    assert seen_by_conv == [enabled]  # cuDNN stays as it was outside the RNNs
    assert torch.backends.cudnn.enabled is enabled
    torch.testing.assert_close(inside_value, value)
    torch.testing.assert_close(inside_grads, grads)


def test_distances_and_ctc_through_torchs_names_get_a_second_derivative():
    x = randn(6, 3).requires_grad_()
    logits = randn(8, 2, 5, seed=5).requires_grad_()
    targets, lengths = (
        torch.tensor([[1, 2], [3, 3]]),
        (torch.tensor([8, 7]), torch.tensor([2, 2])),
    )
    losses = {
        "cdist": lambda: torch.cdist(x, x.roll(1, 0), p=1.0).sum(),
        "pdist": lambda: F.pdist(x).sum(),
        "ctc_loss": lambda: nn.CTCLoss()(logits.log_softmax(-1), targets, *lengths),
    }
    for name, loss in losses.items():
        wrt = logits if name == "ctc_loss" else x
        (native,) = torch.autograd.grad(loss(), wrt, create_graph=True)
        # torch 2.14 gave cdist and pdist a double backward (the built-ins table); CTC has none.
        if name == "ctc_loss" or TORCH_RELEASE < (2, 14):
            with pytest.raises(RuntimeError, match="not implemented"):
                torch.autograd.grad(native.square().sum(), wrt)
            native_second = None
        else:
            (native_second,) = torch.autograd.grad(native.square().sum(), wrt)
        with ops.replaced():
            (grad,) = torch.autograd.grad(loss(), wrt, create_graph=True)
        (second,) = torch.autograd.grad(grad.square().sum(), wrt)
        assert second.isfinite().all(), name
        # The first derivative is torch's (through log_softmax for CTC), and so is the second
        # where torch has one.
        torch.testing.assert_close(grad, native, msg=name)
        if native_second is not None:
            torch.testing.assert_close(second, native_second, msg=name)


# -- transformers, where it is installed ---------------------------------------------------------


def test_a_transformers_model_with_sdpa_attention_passes_a_gradient_penalty():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=16,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    bert = transformers.BertModel(config).float().eval()

    def model(embeddings):
        return bert(inputs_embeds=embeddings).last_hidden_state

    x = randn(2, 6, 16).float()
    with pytest.raises(RuntimeError, match="not implemented"):
        penalty(_Wrap(model, bert), x)
    with ops.replaced():
        value, grads = penalty(_Wrap(model, bert), x)
    with sdpa_kernel(SDPBackend.MATH):
        expected, expected_grads = penalty(_Wrap(model, bert), x)
    torch.testing.assert_close(value, expected)
    torch.testing.assert_close(grads, expected_grads)


# -- on CUDA ------------------------------------------------------------------------------------


@cuda
def test_on_cuda_a_transformer_encoder_passes_a_gradient_penalty():
    model = transformer_encoder("cuda").float().eval()
    x = randn(2, 5, 16, seed=1).float().cuda()
    with pytest.raises(RuntimeError, match="_scaled_dot_product_.*_attention"):
        penalty(model, x)
    with ops.replaced():
        value, grads = penalty(model, x)
    with sdpa_kernel(SDPBackend.MATH):
        expected, expected_grads = penalty(model, x)
    torch.testing.assert_close(value, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(grads, expected_grads, rtol=1e-4, atol=1e-5)


@cuda
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_on_cuda_an_lstm_passes_a_gradient_penalty(mode):
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 6, batch_first=True).cuda()
    getattr(lstm, mode)()
    model = _Wrap(lambda x: lstm(x)[0], lstm)
    x = randn(2, 5, 4).float().cuda()
    with pytest.raises((RuntimeError, NotImplementedError), match="cudnn|_cudnn_rnn"):
        penalty(model, x)
    with ops.replaced():
        value, _ = penalty(model, x)
    with torch.backends.cudnn.flags(enabled=False):
        expected, _ = penalty(model, x)
    torch.testing.assert_close(value, expected)


def test_rnns_run_after_torch_froze_the_global_flags():
    # torch's test utilities call disable_global_flags(); setting cudnn.enabled directly then
    # raises. A fresh process, since the freeze cannot be undone.
    script = (
        "import torch; from torch import nn; from double_backward import ops\n"
        "torch.backends.disable_global_flags()\n"
        "lstm = nn.LSTM(2, 3)\n"
        "with ops.replaced():\n"
        "    lstm(torch.randn(4, 1, 2))\n"
        "assert torch.backends.cudnn.enabled\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
