"""LayerNorm with weight and bias against F.layer_norm to the third derivative, and the trap.

Models the LayerNorm that fused kernels reimplement (apex's ``FusedLayerNormAffineFunction``,
Megatron's, Triton tutorials'): several inputs, statistics over the last dimensions, weight and
bias broadcast over the rows. The trap saves the mean and 1/std from forward; its Hessian error
is measured against the native op, which is independent of the code under test.

The third derivative is checked against LayerNorm composed of native elementwise ops and
reductions, not against ``F.layer_norm``: the native op keeps its own mean and 1/std without
history, so its third derivative is wrong (pytorch/pytorch#175754, the trap one order up);
orders 0 to 2 are checked against ``F.layer_norm`` too.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward.functions.failures import layer_norm_saves_statistics
from double_backward.functions.layer_norm import layer_norm, layer_norm_with_statistics

from .directional import assert_matches_native

FIXED = [
    pytest.param(layer_norm, id="recompute"),
    pytest.param(layer_norm_with_statistics, id="statistics-as-outputs"),
]


# (x shape, normalized_shape): one row, rows over one dim, a 2-d normalized shape, 4-d input.
def composed_layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    """LayerNorm from native ops whose derivatives are right to every order."""
    dims = tuple(range(-len(normalized_shape), 0))
    centred = x - x.mean(dims, keepdim=True)
    y = centred / torch.sqrt((centred**2).mean(dims, keepdim=True) + eps)
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


REFERENCES = [
    pytest.param(F.layer_norm, 2, id="F.layer_norm-to-second-order"),
    pytest.param(composed_layer_norm, 3, id="composed-ops-to-third-order"),
]

SHAPES = [((5,), (5,)), ((3, 6), (6,)), ((2, 3, 4), (3, 4)), ((2, 2, 3, 4), (4,))]


def inputs(shape, normalized_shape, dtype=torch.float64, seed=0):
    generator = torch.Generator().manual_seed(seed)

    def randn(*size):
        return torch.randn(size, generator=generator, dtype=torch.float64).to(dtype)

    return randn(*shape), randn(*normalized_shape), randn(*normalized_shape)


@pytest.mark.parametrize("ours", FIXED)
@pytest.mark.parametrize(("reference", "orders"), REFERENCES)
@pytest.mark.parametrize(("shape", "normalized_shape"), SHAPES)
def test_value_and_three_derivatives_match_native_in_float64(
    ours, reference, orders, shape, normalized_shape
):
    assert_matches_native(
        lambda x, w, b: ours(x, normalized_shape, w, b),
        lambda x, w, b: reference(x, normalized_shape, w, b),
        inputs(shape, normalized_shape), rtol=1e-9, atol=1e-10, orders=orders,
    )  # fmt: skip


@pytest.mark.parametrize("ours", FIXED)
@pytest.mark.parametrize(("reference", "orders"), REFERENCES)
def test_value_and_three_derivatives_match_native_in_float32(ours, reference, orders):
    assert_matches_native(
        lambda x, w, b: ours(x, (16,), w, b),
        lambda x, w, b: reference(x, (16,), w, b),
        inputs((4, 16), (16,), torch.float32), rtol=2e-3, atol=2e-3, orders=orders,
    )  # fmt: skip


@pytest.mark.parametrize("ours", FIXED)
@pytest.mark.parametrize(("reference", "orders"), REFERENCES)
def test_without_weight_and_bias_matches_native(ours, reference, orders):
    (x, _, _) = inputs((3, 5), (5,))
    assert_matches_native(
        lambda x: ours(x, (5,)), lambda x: reference(x, (5,)), [x],
        rtol=1e-9, atol=1e-10, orders=orders,
    )  # fmt: skip


@pytest.mark.parametrize("ours", FIXED)
def test_third_order_passes_gradgradcheck_of_the_gradient(ours):
    # Finite differences of the second derivative: independent of any reference op.
    x, weight, bias = (t.requires_grad_() for t in inputs((3, 6), (6,)))
    grad_out = torch.randn(3, 6, dtype=torch.float64)

    def gradient(x, weight, bias):
        return torch.autograd.grad(ours(x, (6,), weight, bias), (x, weight), grad_out,
                                   create_graph=True)  # fmt: skip

    assert gradgradcheck(gradient, (x, weight, bias))


@pytest.mark.parametrize("ours", FIXED)
@pytest.mark.parametrize(("shape", "normalized_shape"), SHAPES[1:3])
def test_gradcheck_and_gradgradcheck_pass_in_every_input(ours, shape, normalized_shape):
    tensors = [t.requires_grad_() for t in inputs(shape, normalized_shape)]

    def fn(x, w, b):
        return ours(x, normalized_shape, w, b)

    assert gradcheck(fn, tensors)
    assert gradgradcheck(fn, tensors)


def relative_hvp_error(fn, seed: int) -> float:
    """‖H v − H_native v‖ / ‖H_native v‖ for the input x, at 8 rows of 64, float64."""
    x, weight, bias = inputs((8, 64), (64,), seed=seed)
    generator = torch.Generator().manual_seed(seed + 1000)
    grad_out, v = (
        torch.randn(8, 64, generator=generator, dtype=torch.float64) for _ in "gv"
    )

    def hvp(f):
        xr = x.clone().requires_grad_()
        (grad_x,) = torch.autograd.grad(f(xr, (64,), weight, bias), xr, grad_out,
                                        create_graph=True)  # fmt: skip
        return torch.autograd.grad(grad_x, xr, v)[0]

    expected = hvp(F.layer_norm)
    return ((hvp(fn) - expected).norm() / expected.norm()).item()


# The trap drops every term through dμ/dx and dr/dx. Those are of the same size as the terms it
# keeps (all scale as r²/√N for unit-scale inputs), so the error is a sizeable fraction, never
# rounding: the fixed versions agree to 1e-12. 10% is far from both.
TRAP_THRESHOLD = 0.10


@pytest.mark.parametrize("seed", range(5))
def test_trap_hessian_is_more_than_ten_percent_wrong(seed):
    assert relative_hvp_error(layer_norm_saves_statistics, seed) > TRAP_THRESHOLD


@pytest.mark.parametrize("ours", FIXED)
@pytest.mark.parametrize("seed", range(2))
def test_fixed_versions_hessian_is_right_where_the_trap_is_wrong(ours, seed):
    assert relative_hvp_error(ours, seed) < 1e-12


def test_trap_first_derivative_is_right_and_gradgradcheck_catches_it():
    tensors = [t.requires_grad_() for t in inputs((3, 4), (4,))]

    def fn(x, w, b):
        return layer_norm_saves_statistics(x, (4,), w, b)

    assert gradcheck(fn, tensors)
    # Nothing raises: x is saved and tracked, so the second derivative is only wrong.
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(fn, tensors)


def test_trap_is_wrong_in_a_composed_loss_a_gradient_penalty():
    # A critic x -> Linear -> LayerNorm -> tanh -> Linear with a WGAN-GP style penalty on the
    # input gradient; its gradient with respect to the parameters is a double backward.
    def penalty_gradient(norm):
        generator = torch.Generator().manual_seed(0)
        w1, w2 = (torch.randn(s, generator=generator, dtype=torch.float64) / 4
                  for s in ((16, 32), (32, 1)))  # fmt: skip
        gain = torch.ones(32, dtype=torch.float64)
        params = [t.requires_grad_() for t in (w1, w2, gain)]
        x = torch.randn(
            64, 16, generator=generator, dtype=torch.float64
        ).requires_grad_()
        out = torch.tanh(norm(x @ w1, (32,), gain, None)) @ w2
        (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        penalty = ((grad_x.norm(dim=1) - 1) ** 2).mean()
        return torch.cat([g.flatten() for g in torch.autograd.grad(penalty, params)])

    expected = penalty_gradient(F.layer_norm)
    torch.testing.assert_close(penalty_gradient(layer_norm), expected)
    torch.testing.assert_close(penalty_gradient(layer_norm_with_statistics), expected)
    trap = penalty_gradient(layer_norm_saves_statistics)
    assert ((trap - expected).norm() / expected.norm()).item() > 0.05


@pytest.mark.parametrize("ours", [*FIXED, layer_norm_saves_statistics])
def test_bad_input_is_refused_with_a_clear_message(ours):
    x = torch.randn(2, 3)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        ours([1.0], 1)
    with pytest.raises(TypeError, match="floating-point"):
        ours(torch.ones(2, 3, dtype=torch.int64), 3)
    with pytest.raises(ValueError, match=r"equal the last dimensions of x"):
        ours(x, 2)
    with pytest.raises(TypeError, match="sequence of ints"):
        ours(x, (3.0,))
    with pytest.raises(ValueError, match="'weight' must have shape"):
        ours(x, 3, torch.ones(2))
    with pytest.raises(ValueError, match="'eps' must be a number >= 0"):
        ours(x, 3, None, None, -1.0)
