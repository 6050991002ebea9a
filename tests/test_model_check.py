"""double_backward.check_model on the models readers train, each verdict established here.

The expected verdicts come from outside the code under test: the gradient penalty itself
(``grad(create_graph=True)`` then a second backward) raising or not, ``gradgradcheck``, and
a Hessian-vector product compared with finite differences written out in this file.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradgradcheck

from double_backward import check_model, ops
from double_backward.checker.model import FIXES, Break, fix_for
from double_backward.functions.failures import SquareOnceDifferentiable

# Broken Functions modelled on real projects (unsloth's RoPE, a no_grad backward).
from .checker_corpus import NoGradBackwardSquare, RoPEInplaceGrad


def gradient_penalty(model, x: torch.Tensor) -> None:
    """What WGAN-GP runs: the input gradient's squared norm, differentiated again."""
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    (grad_x**2).sum().backward()


def hvp_matches_finite_differences(model, x: torch.Tensor, step: float = 1e-6) -> bool:
    """H v against central differences of the input gradient, v = ones, in float64."""
    x = x.detach().double().requires_grad_()
    direction = torch.ones_like(x)

    def gradient(at: torch.Tensor, create_graph: bool = False) -> torch.Tensor:
        return torch.autograd.grad(model(at).sum(), at, create_graph=create_graph)[0]

    grad_x = gradient(x, create_graph=True)
    if grad_x.requires_grad:
        (hvp,) = torch.autograd.grad((grad_x * direction).sum(), x)
    else:
        hvp = torch.zeros_like(x)
    plus = gradient((x + step * direction).detach().requires_grad_())
    minus = gradient((x - step * direction).detach().requires_grad_())
    return torch.allclose(hvp, (plus - minus) / (2 * step), rtol=1e-4, atol=1e-6)


def transformer(**kwargs) -> nn.TransformerEncoder:
    """A small discriminator body: two encoder layers, as nn.TransformerEncoder builds them."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, **kwargs)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


# -- raises -----------------------------------------------------------------------------
@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
def test_transformer_encoder_raises_in_each_self_attn(train):
    model = transformer(dropout=0.0).train(train)
    x = torch.randn(2, 5, 16)
    with pytest.raises(RuntimeError, match="derivative for aten::"):
        gradient_penalty(model, x)
    report = check_model(model, x)
    assert not report.ok
    assert [b.module for b in report.breaks] == [
        "layers.0.self_attn",
        "layers.1.self_attn",
    ]
    assert {b.kind for b in report.breaks} == {"raises"}
    assert {b.op for b in report.breaks} == {
        "aten::_scaled_dot_product_flash_attention_for_cpu"
    }
    assert all("SDPBackend.MATH" in b.fix for b in report.breaks)


def test_the_located_self_attn_raises_on_its_own():
    """Independently of check_model's location: self_attn alone, as the layer calls it."""
    attention = transformer(dropout=0.0).layers[0].self_attn
    x = torch.randn(2, 5, 16)
    with pytest.raises(RuntimeError, match="flash_attention"):
        gradient_penalty(lambda t: attention(t, t, t, need_weights=False)[0], x)


class MetricHead(nn.Module):
    """A metric-learning head: embeddings, then their pairwise distances (ProtoNets, triplets)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.embed(x)
        return -torch.cdist(z, z.flip(0))


def _cdist_penalty_raises() -> bool:
    """Whether the installed torch's cdist on 5 points raises under a gradient penalty:
    torch 2.13.0's does, 2.14.1 has its double backward."""
    try:
        gradient_penalty(lambda a: torch.cdist(a, a + 1), torch.randn(5, 3))
    except NotImplementedError:
        return True
    return False


CDIST_RAISES = _cdist_penalty_raises()


def test_cdist_on_five_points_raises_where_it_is_called():
    model, x = MetricHead(), torch.randn(5, 4)
    if not CDIST_RAISES:  # a torch with cdist's double backward: nothing breaks
        gradient_penalty(model, x)
        assert hvp_matches_finite_differences(copy.deepcopy(model).double(), x)
        assert check_model(model, x).ok
        return
    with pytest.raises(NotImplementedError, match="_cdist_backward"):
        gradient_penalty(model, x)
    report = check_model(model, x)
    (found,) = report.breaks
    assert (found.module, found.op, found.kind) == ("", "aten::_cdist", "raises")
    assert "_cdist_backward" in found.message
    assert found.fix == FIXES["cdist"]
    assert "(the model itself)" in str(report)
    assert "builtins.html" in str(report)


class Attention(nn.Module):
    """Self-attention as timm's ViT writes it: one qkv projection, then a fused attention call."""

    def __init__(self, attention, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.attention, self.heads = attention, heads
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, dim // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        out = self.attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(batch, length, dim))


class Block(nn.Module):
    """A pre-norm transformer block (timm's ViT Block, without dropout)."""

    def __init__(self, attention) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(16), Attention(attention)
        self.norm2 = nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


def vit(attention) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(Block(attention), Block(attention))


def test_vit_blocks_with_torch_attention_raise_in_each_attn():
    model, x = vit(F.scaled_dot_product_attention), torch.randn(2, 5, 16)
    with pytest.raises(RuntimeError, match="flash_attention"):
        gradient_penalty(model, x)
    report = check_model(model, x)
    assert [b.module for b in report.breaks] == ["0.attn", "1.attn"]


def test_the_same_blocks_with_ops_attention_are_ok():
    model = vit(ops.scaled_dot_product_attention).double()
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    gradient_penalty(model, x)  # raises nothing
    assert hvp_matches_finite_differences(model, x)
    report = check_model(model.float(), x.detach().float())
    assert report.ok, str(report)


# -- silent -----------------------------------------------------------------------------
class FusedSquare(nn.Module):
    """A fused op whose backward is first-order only (@once_differentiable, as mmcv's are)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SquareOnceDifferentiable.apply(self.linear(x))


class TwoPaths(nn.Module):
    """The fused branch's output summed with an ordinary branch (a residual block's shape)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fused = FusedSquare()
        self.plain = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fused(x) + self.plain(x)


def test_once_differentiable_branch_is_a_silent_break_in_its_submodule():
    model, x = TwoPaths().double(), torch.randn(3, 4, dtype=torch.float64)
    gradient_penalty(
        model, x
    )  # raises nothing: the other path gives the gradient a graph
    assert not hvp_matches_finite_differences(model, x)
    report = check_model(model, x)
    (found,) = report.breaks
    assert (found.module, found.op, found.kind) == (
        "fused",
        "SquareOnceDifferentiable",
        "silent",
    )
    assert "once_differentiable" in found.fix


# -- a break at a custom Function: what double_backward.check finds in it is named --------
# Each Function below is written to break in one way; the break itself is shown with plain
# torch, and the cause expected is the one it was written with.
class Rotary(nn.Module):
    """q = Wx rotated, plus q * x: the product's backward runs first and keeps the gradient
    both share, which the rotation's backward then edits."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        angle = torch.linspace(0.1, 1.0, 2).repeat(2)
        self.register_buffer("cos", angle.cos())
        self.register_buffer("sin", angle.sin())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.linear(x)
        return RoPEInplaceGrad.apply(q, self.cos, self.sin) + q * x


class CubeSavesSquare(torch.autograd.Function):
    """BROKEN: x³ saving the intermediate x² (made in forward, so without history)."""

    @staticmethod
    def forward(ctx, x):
        square = x * x
        ctx.save_for_backward(square)
        return square * x

    @staticmethod
    def backward(ctx, grad):
        (square,) = ctx.saved_tensors
        return grad * 3 * square


class Applies(nn.Module):
    """A linear layer, then the Function."""

    def __init__(self, function) -> None:
        super().__init__()
        self.function, self.linear = function, nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.function.apply(self.linear(x))


def test_a_backward_editing_its_incoming_gradient_is_named_as_such():
    grad = torch.ones(3, 4)  # plain torch: backward changes the caller's tensor
    q = torch.randn(3, 4, requires_grad=True)
    RoPEInplaceGrad.apply(q, torch.full((4,), 0.5), torch.full((4,), 0.5)).backward(grad)
    assert not torch.equal(grad, torch.ones(3, 4))
    torch.manual_seed(0)
    model, x = nn.Sequential(Rotary(), nn.Tanh()), torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        gradient_penalty(copy.deepcopy(model), x)
    (found,) = check_model(model, x).breaks
    assert (found.module, found.op, found.kind) == ("0", "RoPEInplaceGrad", "raises")
    assert found.cause.startswith("custom Function RoPEInplaceGrad: backward modified its "
                                  "incoming gradient in place")  # fmt: skip
    assert "[modifies-incoming-gradient]" in found.cause
    assert "clone it first" in found.fix and "cause: custom Function" in str(found)
    assert "apply" not in RoPEInplaceGrad.__dict__  # the watched apply is put back


@pytest.mark.parametrize(
    ("function", "problem", "words"),
    [
        (NoGradBackwardSquare, "no-graph", "runs operations under no_grad"),
        (CubeSavesSquare, "saved-intermediate", "saved tensor #0 of CubeSavesSquare"),
    ],
    ids=["untracked-float32-backward", "saved-intermediate"],
)
def test_a_silent_break_at_a_custom_function_names_its_cause(function, problem, words):
    torch.manual_seed(0)
    model = nn.Sequential(Applies(function), nn.Tanh()).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    gradient_penalty(model, x)  # raises nothing, yet the second derivative is wrong:
    assert not hvp_matches_finite_differences(model, x)
    (found,) = check_model(model, x).breaks
    assert (found.module, found.op, found.kind) == ("0", function.__name__, "silent")
    assert found.cause.startswith(f"custom Function {function.__name__}: ")
    assert found.cause.endswith(f"[{problem}]") and words in found.fix
    assert "Seen" not in found.fix  # check's own copies of the inputs are not shown


def test_the_broken_function_is_named_not_a_sound_one_nearer_the_output():
    from double_backward import Sinh, sinh

    class ThenSinh(
        nn.Module
    ):  # the sound Sinh is the custom Function nearest the output
        def __init__(self) -> None:
            super().__init__()
            self.cube = Applies(CubeSavesSquare)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return Sinh.apply(self.cube(x) / 4)[0]

    torch.manual_seed(0)
    model = nn.Sequential(ThenSinh(), nn.Tanh()).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    assert not hvp_matches_finite_differences(model, x)  # plain torch: a silent break
    torch.manual_seed(1)
    assert gradgradcheck(sinh, torch.randn(3, dtype=torch.float64, requires_grad=True))
    (found,) = check_model(model, x).breaks
    assert (found.module, found.op) == ("0.cube", "CubeSavesSquare"), str(found)
    assert found.cause.endswith("[saved-intermediate]")


def test_the_watched_apply_is_put_back_when_the_call_fails():
    from double_backward.checker.model.functions import diagnose

    def failing_call():
        CubeSavesSquare.apply(torch.randn(2, requires_grad=True))
        raise RuntimeError("the call fails after the Function ran")

    assert diagnose([CubeSavesSquare], failing_call, torch.device("cpu")) is None
    assert "apply" not in CubeSavesSquare.__dict__
    x = torch.randn(2, requires_grad=True)
    torch.testing.assert_close(CubeSavesSquare.apply(x), x**3)  # the inherited apply


# -- ok ---------------------------------------------------------------------------------
def test_mlp_with_relu_and_layernorm_is_ok():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.ReLU(), nn.Linear(8, 1))
    x = torch.randn(6, 4, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(model.double(), (x,))
    report = check_model(model.float(), x.detach().float())
    assert report.ok, str(report)
    assert report.breaks == []


def test_lstm_is_ok():
    torch.manual_seed(0)
    model = nn.LSTM(4, 5, batch_first=True)
    x = torch.randn(2, 3, 4, dtype=torch.float64, requires_grad=True)
    assert gradgradcheck(lambda t: model.double()(t)[0], (x,))
    report = check_model(model.float(), x.detach().float())
    assert report.ok, str(report)


def test_the_hvp_check_finds_what_gradgradcheck_finds_on_a_smooth_model():
    """The two-path model with the fused branch removed: no break, and none reported."""
    model = TwoPaths()
    model.fused = nn.Sequential(nn.Linear(4, 4), nn.Softplus())
    model = model.double()
    x = torch.randn(3, 4, dtype=torch.float64)
    assert hvp_matches_finite_differences(model, x)
    assert check_model(model, x).ok


# -- what it differentiates, skips and leaves alone ---------------------------------------
class Embedder(nn.Module):
    """Token ids and a float mask in, as a text model takes them; a buffer, a frozen weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(10, 4)
        self.embedding.weight.requires_grad_(False)
        self.norm = nn.BatchNorm1d(4)

    def forward(
        self, ids: torch.Tensor, mask: torch.Tensor, scale: float
    ) -> torch.Tensor:
        return torch.tanh(self.norm(self.embedding(ids) * mask[:, None]) * scale)


def test_skipped_inputs_buffers_and_frozen_parameters_are_listed():
    model = Embedder()
    before = model.norm.running_mean.clone()
    report = check_model(model, torch.tensor([1, 2, 3]), torch.rand(3), 2.0)
    assert report.ok, str(report)
    text = str(report)
    assert "torch.int64" in text and "non-tensor" in text
    assert "norm.running_mean" in text and "embedding.weight" in text
    torch.testing.assert_close(
        model.norm.running_mean, before
    )  # the model is not changed


def test_a_plain_callable_is_checked_with_respect_to_its_inputs():
    report = check_model(lambda a, b: (torch.sin(a) * b, a.sum()), torch.randn(3),
                         torch.randn(3))  # fmt: skip
    assert report.ok, str(report)


def test_a_plain_callable_with_cdist_raises_in_the_model_itself():
    report = check_model(lambda a: torch.cdist(a, a + 1), torch.randn(4, 2))
    assert [b.module for b in report.breaks] == ([""] if CDIST_RAISES else [])


def test_report_prints_the_verdict_first_then_one_entry_per_break():
    model = transformer(dropout=0.0).eval()
    lines = str(check_model(model, torch.randn(1, 4, 16))).splitlines()
    assert lines[0] == "TransformerEncoder: 2 breaks of double backward."
    assert sum(line.lstrip().startswith("[raises] layers.") for line in lines) == 2


def test_bad_arguments_get_clear_errors():
    with pytest.raises(TypeError, match="must be an nn.Module or a callable"):
        check_model(3, torch.randn(2))
    with pytest.raises(ValueError, match="nothing to differentiate"):
        check_model(lambda ids: ids * 2, torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="no floating-point output"):
        check_model(lambda x: x > 0, torch.randn(2))
    # An error in the forward pass is not a break of double backward: it is said as such.
    with pytest.raises(ValueError, match="calling the model raised RuntimeError"):
        check_model(nn.Linear(3, 2), torch.randn(2, 4))


def test_fix_for_an_unknown_op_says_how_to_write_one():
    assert "custom Function" in fix_for("aten::ctc_loss")
    assert fix_for("aten::_pdist_backward") == FIXES["_pdist"]
    assert "fix:" in str(Break("a", "op", "raises", "message", "the fix"))


def test_the_layer_norm_fix_is_an_explicit_weight_not_f_layer_norm():
    # native_layer_norm's break: weight=None with a bias. F.layer_norm takes the same path,
    # so it is no fix; an explicit weight of ones is (plain torch, no package code).
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def penalty(weight):
        loss = (F.layer_norm(x, (3,), weight, bias) ** 2).sum()
        grads = torch.autograd.grad(loss, (x, bias), create_graph=True)
        return torch.autograd.grad(sum((g * g).sum() for g in grads), (x, bias))

    with pytest.raises(RuntimeError, match="Expected a proper Tensor but got None"):
        penalty(None)
    penalty(torch.ones(3, dtype=torch.float64))
    assert "weight=torch.ones(normalized_shape)" in fix_for(
        "aten::native_layer_norm_backward"
    )


def test_a_ddp_wrapped_model_is_pointed_to_check_distributed(tmp_path):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    # One process is enough to build the wrapper; check_model must not check it as a module.
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        ddp = DistributedDataParallel(torch.nn.Linear(3, 1))
        with pytest.raises(TypeError, match="check_distributed") as raised:
            check_model(ddp, torch.randn(2, 3))
        assert "model.module" in str(raised.value)
    finally:
        dist.destroy_process_group()
