"""cube and cube_backward: the tutorial's Cube as two torch.library custom operators.

Values and the first three derivatives against native ``x**3`` at edge values are in
test_against_native.py (``cube-custom-op`` in helpers.CORRECT_FUNCTIONS); here: the operator
registrations (opcheck), both inputs of the backward operator, what torch.func gives and does
not give, fake tensors and export, and the broken variant whose backward has no autograd.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

from double_backward.functions.custom_ops import cube, cube_backward
from double_backward.functions.failures import (
    cube_backward_without_autograd,
    cube_with_untracked_backward,
)


def _leaf(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


# torch 2.14's opcheck (test_aot_dispatch_dynamic) fakes each input through
# torch._subclasses.meta_utils.safe_grad, which reads `.grad` of a non-leaf tensor and hides the
# UserWarning that triggers with a showwarning hook (torch._logging.hide_warnings). When warnings
# are errors, the warning raises before that hook runs, and opcheck reports it as a failure of
# test_aot_dispatch_dynamic. torch 2.13 does not read it. Only that message, from that module.
NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed."
)


def _opcheck(op, args):
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=re.escape(NON_LEAF_GRAD_WARNING),
            category=UserWarning,
            module=r"torch\._subclasses\.meta_utils\Z",
        )
        return torch.library.opcheck(op, args)


@pytest.mark.parametrize(
    "make_args",
    [
        lambda: (_leaf(0.0, -1.5, 2.0),),
        lambda: (torch.randn(3, 4, dtype=torch.float64, requires_grad=True),),
        lambda: (torch.randn(4, 6)[:, ::2],),  # non-contiguous, float32, no grad
    ],
    ids=["1-d", "3x4", "non-contiguous"],
)
def test_opcheck_passes_for_cube(make_args):
    torch.manual_seed(0)
    result = _opcheck(cube, make_args())
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_passes_for_cube_backward_with_broadcasting():
    torch.manual_seed(0)
    grad_out = torch.randn(3, 1, dtype=torch.float64, requires_grad=True)
    x = torch.randn(4, dtype=torch.float64, requires_grad=True)
    result = _opcheck(cube_backward, (grad_out, x))
    assert set(result.values()) == {"SUCCESS"}, result


def test_cube_backward_passes_gradcheck_and_gradgradcheck_in_both_inputs():
    torch.manual_seed(0)
    grad_out = torch.randn(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(cube_backward, (grad_out, x))
    assert gradgradcheck(cube_backward, (grad_out, x))


def test_grad_x_is_the_output_of_the_backward_operator():
    x = _leaf(1.0, -2.0)
    (grad_x,) = torch.autograd.grad(cube(x).sum(), x, create_graph=True)
    assert "cube_backward" in type(grad_x.grad_fn).__name__


def test_third_derivative_against_native_with_a_grad_out_that_requires_grad():
    # The third derivative also flows into grad_out: compare every gradient with x**3's.
    x = _leaf(-1.5, 0.5, 2.0)
    results = []
    for fn in (cube, lambda t: t**3):
        grad_out = torch.tensor(
            [0.5, -2.0, 1.0], dtype=torch.float64, requires_grad=True
        )
        (g1,) = torch.autograd.grad(fn(x), x, grad_out, create_graph=True)
        (g2,) = torch.autograd.grad(g1.sum(), x, create_graph=True)
        results.append(torch.autograd.grad(g2.sum(), (x, grad_out), allow_unused=True))
    torch.testing.assert_close(results[0], results[1])


def test_vmap_uses_the_registered_batching_rule_and_matches_native():
    batch = torch.randn(5, 3, dtype=torch.float64)
    for name in ("cube", "cube_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(
            f"double_backward::{name}", "FuncTorchBatched"
        )
    torch.testing.assert_close(torch.func.vmap(cube, in_dims=1)(batch), batch.T**3)
    ones = torch.ones(3, dtype=torch.float64)
    torch.testing.assert_close(
        torch.func.vmap(cube_backward, in_dims=(None, 0))(ones, batch), 3 * batch**2
    )


def test_reverse_mode_torch_func_refuses_the_operator():
    # What the page and the matrix state for torch 2.13: the autograd registration is an
    # old-style Function inside, which torch.func's grad transforms refuse.
    with pytest.raises(RuntimeError, match="must override the setup_context"):
        torch.func.jacrev(cube)(torch.ones(3, dtype=torch.float64))


def test_forward_mode_gives_zero_tangents_silently():
    # The page's warning: no forward-mode rule, and no error either.
    x = torch.tensor([-1.5, 0.5, 2.0], dtype=torch.float64)
    _, tangent = torch.func.jvp(cube, (x,), (torch.ones_like(x),))
    _, native_tangent = torch.func.jvp(lambda t: t**3, (x,), (torch.ones_like(x),))
    assert torch.equal(tangent, torch.zeros_like(x))
    assert not torch.equal(native_tangent, tangent)


def test_fake_tensors_give_shape_and_dtype_without_running_numpy():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(2, 3, dtype=torch.float64)
        grad_out = torch.empty(4, 1, 1, dtype=torch.float32)
        assert cube(x).shape == (2, 3)
        result = cube_backward(grad_out, x)
        assert result.shape == (4, 2, 3)
        assert result.dtype == torch.float64


def test_export_keeps_the_operator_as_one_node():
    class Model(torch.nn.Module):
        def forward(self, x):
            return cube(x)

    program = torch.export.export(Model(), (torch.ones(3),))
    targets = [
        node.target for node in program.graph.nodes if node.op == "call_function"
    ]
    assert targets == [torch.ops.double_backward.cube.default]


def test_bad_input_is_rejected_naming_the_operator_and_argument():
    with pytest.raises(
        RuntimeError, match=r"double_backward::cube\(\) Expected a value"
    ):
        cube([1.0, 2.0])
    with pytest.raises(TypeError, match="cube_backward: argument 'x' must be a real"):
        cube_backward(torch.ones(2), torch.ones(2, dtype=torch.complex64))


def test_backward_operator_without_autograd_fails_at_the_second_order():
    x = _leaf(-1.5, 0.5, 2.0)
    (grad_x,) = torch.autograd.grad(
        cube_with_untracked_backward(x).sum(), x, create_graph=True
    )
    torch.testing.assert_close(grad_x, 3 * x.detach() ** 2)  # first order: right
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        torch.autograd.grad(grad_x.sum(), x)


def test_backward_operator_without_autograd_computes_the_right_value():
    grad_out = torch.tensor([2.0, 1.0], dtype=torch.float64)
    x = torch.tensor([1.0, -3.0], dtype=torch.float64)
    torch.testing.assert_close(
        cube_backward_without_autograd(grad_out, x), grad_out * 3 * x**2
    )
