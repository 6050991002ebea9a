"""The incoming gradients real use feeds and the value checks do not (issue 37, point 5):
transposed and expanded ones, missing ones, batched ones, at first order (backward) and
second order (the backward of backward); each broken Function against its correct twin.

Each Function is written the way real projects write them, the pattern named in a comment.
What is broken is established here without the checker: by plain torch (autograd.grad with a
transposed or expanded incoming gradient, a loss that uses one output, is_grads_batched) and
by torch's own gradcheck and gradgradcheck with check_undefined_grad=True or
check_batched_grad=True, which check() did not run.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd import Function, gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from double_backward import check
from double_backward.checker import main

# -- layouts: .view() on the incoming gradient ----------------------------------------------


class SquareFlatView(Function):
    """A pointwise op whose backward flattens its incoming gradient with .view() before the
    arithmetic, as wrappers of flat kernels do (`grad_output.view(-1)` then a 1-D kernel)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.view(-1) * 2 * x.view(-1)).view(x.shape)


class SquareFlatReshape(SquareFlatView):
    """The fix: .reshape() copies when the strides do not allow a view."""

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return (grad_output.reshape(-1) * 2 * x.reshape(-1)).reshape(x.shape)


class _SquareBackwardView(Function):
    """backward of Square written as a Function of its own (the double backward by hand, as
    this project's deriving page does), flattening the gradient it gets with .view()."""

    @staticmethod
    def forward(ctx, x, grad_output):
        ctx.save_for_backward(x, grad_output)
        return 2 * x * grad_output

    @staticmethod
    def backward(ctx, grad_grad):
        x, grad_output = ctx.saved_tensors
        flat = grad_grad.view(-1)
        return ((2 * grad_output.reshape(-1) * flat).view(x.shape),
                (2 * x.reshape(-1) * flat).view(x.shape))  # fmt: skip


class _SquareBackwardReshape(_SquareBackwardView):
    @staticmethod
    def backward(ctx, grad_grad):
        x, grad_output = ctx.saved_tensors
        return 2 * grad_output * grad_grad.contiguous(), 2 * x * grad_grad.contiguous()


class SquareHandWrittenView(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return _SquareBackwardView.apply(x, grad_output)


class SquareHandWrittenReshape(SquareHandWrittenView):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return _SquareBackwardReshape.apply(x, grad_output)


def _transposed(shape):
    return torch.randn(*reversed(shape), dtype=torch.float64).mT


def _expanded(shape):  # what y.sum(0) downstream gives: one row, stride 0
    return torch.randn(1, *shape[1:], dtype=torch.float64).expand(shape)


LAYOUTS = [_transposed, _expanded]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["transposed", "expanded"])
def test_plain_torch_a_view_in_backward_raises_on_an_odd_incoming_gradient(layout):
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.autograd.grad(SquareFlatView.apply(x), x, layout(x.shape))
    got = torch.autograd.grad(SquareFlatReshape.apply(x), x, layout(x.shape))[0]
    assert got.shape == x.shape
    # The same in a model: a transpose, then a weight, downstream.
    weight = torch.randn(3, 4, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.autograd.grad((SquareFlatView.apply(x).t() * weight).sum(), x)


@pytest.mark.parametrize("layout", LAYOUTS, ids=["transposed", "expanded"])
def test_plain_torch_a_view_in_double_backward_raises_on_an_odd_gradient(layout):
    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    for fn, raises in (
        (SquareHandWrittenView, True),
        (SquareHandWrittenReshape, False),
    ):
        (g,) = torch.autograd.grad(fn.apply(x), x, torch.randn(4, 3, dtype=torch.float64),
                                   create_graph=True)  # fmt: skip
        if raises:
            with pytest.raises(RuntimeError, match="view size is not compatible"):
                torch.autograd.grad(g, x, layout(x.shape))
        else:
            torch.autograd.grad(g, x, layout(x.shape))
        # gradgradcheck feeds contiguous gradients to the backward of backward: it passes.
        assert gradgradcheck(fn.apply, (x,))


def test_a_view_on_the_incoming_gradient_is_reported_at_order_one_with_the_fix():
    report = check(SquareFlatView.apply, torch.randn(4, 3))
    assert report.problem_names() == {"incoming-gradient-layout"}, str(report)
    diagnosis = report.problems[0].diagnosis
    assert diagnosis.startswith("backward fails") and "order 1" in diagnosis
    assert ".reshape() instead of .view()" in diagnosis and ".contiguous()" in diagnosis
    assert "view size is not compatible" in diagnosis
    assert report.results["order 1, yours"].startswith("passed")  # the values are right


def test_a_view_in_the_backward_of_backward_is_reported_at_order_two():
    report = check(SquareHandWrittenView.apply, torch.randn(4, 3))
    assert report.problem_names() == {"incoming-gradient-layout"}, str(report)
    diagnosis = report.problems[0].diagnosis
    assert diagnosis.startswith("the backward of backward") and "order 2" in diagnosis
    assert "order 1" not in diagnosis


@pytest.mark.parametrize("fn", [SquareFlatReshape, SquareHandWrittenReshape])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (7,), (1, 6)])
def test_the_reshape_twins_pass_every_layout(fn, shape):
    report = check(fn.apply, torch.randn(*shape))
    assert report.ok, str(report)
    assert report.results["incoming grads"] == (
        "passed: transposed, expanded, missing, batched (orders 1, 2)"
    )


def test_a_backward_that_reads_the_memory_as_contiguous_is_caught_by_its_values():
    # What a flat C++/CUDA kernel given data_ptr() does: no error, other values.
    class SquareReadsMemory(SquareFlatView):
        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            flat = torch.as_strided(grad_output, (grad_output.numel(),), (1,))
            return (flat * 2 * x.reshape(-1)).reshape(x.shape)

    x = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    v = _transposed(x.shape)
    wrong = torch.autograd.grad(SquareReadsMemory.apply(x), x, v)[0]
    assert not torch.allclose(wrong, 2 * x * v)  # plain torch: the values differ
    report = check(SquareReadsMemory.apply, x.detach())
    assert report.problem_names() == {"incoming-gradient-layout"}, str(report)
    assert (
        "differs from the one for the same values, contiguous"
        in report.problems[0].diagnosis
    )


# -- missing gradients: set_materialize_grads(False) ----------------------------------------


class SquareAndCube(Function):
    """Two outputs, ctx.set_materialize_grads(False) to skip the work for an unused one (as
    the example of torch's set_materialize_grads docs does), and no check for None."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * x, x * x * x

    @staticmethod
    def backward(ctx, grad_square, grad_cube):
        (x,) = ctx.saved_tensors
        return grad_square * 2 * x + grad_cube * 3 * x * x


class SquareAndCubeChecksNone(SquareAndCube):
    @staticmethod
    def backward(ctx, grad_square, grad_cube):
        (x,) = ctx.saved_tensors
        grad = torch.zeros_like(x)
        if grad_square is not None:
            grad = grad + grad_square * 2 * x
        if grad_cube is not None:
            grad = grad + grad_cube * 3 * x * x
        return grad


class _MulBackward(Function):
    """The backward of x * w as a Function of its own, two outputs (the gradients of x and
    w), ctx.set_materialize_grads(False), no check for None in its backward."""

    @staticmethod
    def forward(ctx, x, w, grad_output):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x, w, grad_output)
        return grad_output * w, grad_output * x

    @staticmethod
    def backward(ctx, grad_gx, grad_gw):
        x, w, grad_output = ctx.saved_tensors
        return grad_gw * grad_output, grad_gx * grad_output, grad_gx * w + grad_gw * x


class _MulBackwardChecksNone(_MulBackward):
    @staticmethod
    def backward(ctx, grad_gx, grad_gw):
        x, w, grad_output = ctx.saved_tensors
        gx = gw = gg = None
        if grad_gw is not None:
            gx, gg = grad_gw * grad_output, grad_gw * x
        if grad_gx is not None:
            gw = grad_gx * grad_output
            gg = grad_gx * w if gg is None else gg + grad_gx * w
        return gx, gw, gg


class MulHandWritten(Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return _MulBackward.apply(x, w, grad_output)


class MulHandWrittenChecksNone(MulHandWritten):
    @staticmethod
    def backward(ctx, grad_output):
        x, w = ctx.saved_tensors
        return _MulBackwardChecksNone.apply(x, w, grad_output)


def _inputs(*shapes):
    return tuple(
        torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes
    )


def test_plain_torch_a_loss_on_one_output_breaks_the_backward_without_none_checks():
    (x,) = _inputs((5,))
    square, _ = SquareAndCube.apply(x)
    with pytest.raises(TypeError):
        torch.autograd.grad(square.sum(), x)
    square, _ = SquareAndCubeChecksNone.apply(x)
    assert torch.allclose(torch.autograd.grad(square.sum(), x)[0], 2 * x)
    with pytest.raises(TypeError):  # its Jacobian takes one output's gradient at a time
        gradcheck(SquareAndCube.apply, (x,), check_undefined_grad=True)
    assert gradcheck(SquareAndCubeChecksNone.apply, (x,), check_undefined_grad=True)


def test_plain_torch_a_penalty_on_one_gradient_breaks_the_double_backward():
    x, w = _inputs((5,), (5,))
    v = torch.randn(5, dtype=torch.float64)
    gx, _ = torch.autograd.grad(
        MulHandWritten.apply(x, w), (x, w), v, create_graph=True
    )
    with pytest.raises(TypeError):
        torch.autograd.grad(gx.pow(2).sum(), w)  # a penalty on the gradient of x alone
    gx, _ = torch.autograd.grad(MulHandWrittenChecksNone.apply(x, w), (x, w), v,
                                create_graph=True)  # fmt: skip
    assert torch.allclose(torch.autograd.grad(gx.pow(2).sum(), w)[0], 2 * v * v * w)
    with pytest.raises(TypeError):
        gradgradcheck(MulHandWritten.apply, (x, w), check_undefined_grad=True)
    assert gradgradcheck(
        MulHandWrittenChecksNone.apply, (x, w), check_undefined_grad=True
    )


# Small: gradcheck's Jacobians (one output's gradient at a time) raise on the None; large:
# no Jacobian, the missing-gradient mode raises on it.
SIZES = [5, 2000]


@pytest.mark.parametrize("size", SIZES)
def test_a_backward_that_cannot_take_none_is_reported_at_order_one_with_the_fix(size):
    report = check(SquareAndCube.apply, torch.randn(size))
    assert report.problem_names() == {"missing-incoming-gradient"}, str(report)
    diagnosis = report.problems[0].diagnosis
    assert diagnosis.startswith("backward fails") and "order 1" in diagnosis
    assert "TypeError" in diagnosis and "NoneType" in diagnosis
    assert "if grad is None" in diagnosis and "set_materialize_grads" in diagnosis
    if size > 100:
        assert "no incoming gradient for output 0" in diagnosis


@pytest.mark.parametrize("size", SIZES)
def test_a_double_backward_that_cannot_take_none_is_reported_at_order_two(size):
    report = check(MulHandWritten.apply, torch.randn(size), torch.randn(size))
    assert report.problem_names() == {"missing-incoming-gradient"}, str(report)
    diagnosis = report.problems[0].diagnosis
    assert diagnosis.startswith("the backward of backward") and "order 2" in diagnosis
    if size > 100:
        assert (
            "no incoming gradient for the gradient with respect to argument 0"
            in diagnosis
        )


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("fn", [SquareAndCubeChecksNone, MulHandWrittenChecksNone])
def test_the_twins_that_check_for_none_pass(fn, size):
    count = fn.forward.__code__.co_argcount - 1  # the inputs besides ctx
    report = check(fn.apply, *(torch.randn(size) for _ in range(count)))
    assert report.ok, str(report)
    assert report.results["incoming grads"] == (
        "passed: transposed, expanded, missing, batched (orders 1, 2)"
    )


def test_a_backward_whose_values_change_when_a_gradient_is_missing_is_caught():
    # Handles None, but wrongly: drops a factor 2 when the cube's gradient is missing.
    class SquareAndCubeWrongWhenNone(SquareAndCube):
        @staticmethod
        def backward(ctx, grad_square, grad_cube):
            (x,) = ctx.saved_tensors
            if grad_cube is None:
                return grad_square * x
            if grad_square is None:
                return grad_cube * 3 * x * x
            return grad_square * 2 * x + grad_cube * 3 * x * x

    (x,) = _inputs((2000,))
    square, _ = SquareAndCubeWrongWhenNone.apply(x)
    (got,) = torch.autograd.grad(square.sum(), x)
    assert not torch.allclose(got, 2 * x)  # the derivative of x**2, by hand
    # Above gradcheck's size: no Jacobian, the missing-gradient mode sees it.
    report = check(SquareAndCubeWrongWhenNone.apply, x.detach())
    assert report.problem_names() == {"missing-incoming-gradient"}, str(report)
    assert "one incoming gradient left out at a time" in report.problems[0].diagnosis


class SquareNoneUnsafe(SquareAndCube):
    """One output, ctx.set_materialize_grads(False), no check for None: an undefined
    gradient (passed on by a later Function that does the same) reaches it as None."""

    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SquareNoneSafe(SquareNoneUnsafe):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return None if grad_output is None else grad_output * 2 * x


@pytest.mark.parametrize("size", SIZES)
def test_one_output_without_a_gradient_what_check_undefined_grad_runs(size):
    (x,) = _inputs((5,))
    assert gradcheck(SquareNoneUnsafe.apply, (x,), check_undefined_grad=False)
    with pytest.raises(TypeError):
        gradcheck(SquareNoneUnsafe.apply, (x,), check_undefined_grad=True)
    assert gradcheck(SquareNoneSafe.apply, (x,), check_undefined_grad=True)
    # Small, check's gradcheck runs check_undefined_grad itself; large, the mode does.
    x = torch.randn(size)
    report = check(SquareNoneUnsafe.apply, x)
    assert report.problem_names() == {"missing-incoming-gradient"}, str(report)
    assert "order 1" in report.problems[0].diagnosis
    if size > 100:
        assert "order 1, no incoming gradient at all: raised TypeError" in (
            report.problems[0].diagnosis
        )
    safe = check(SquareNoneSafe.apply, x)
    assert safe.ok, str(safe)
    assert "missing" in safe.results["incoming grads"]


# -- batched gradients: .item() and branches on the incoming gradient -----------------------


class SquareSkipsZeroGrad(Function):
    """A backward that returns early when its incoming gradient is zero, testing it with
    .item() (the guard of gradient-normalising Functions: `if grad_output_norm == 0`,
    `torch.norm(grad_output).item()`)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        if grad_output.abs().sum().item() == 0:
            return torch.zeros_like(x)
        return grad_output * 2 * x


class SquareNoGuard(SquareSkipsZeroGrad):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class _SquareBackwardSkipsZero(_SquareBackwardReshape):
    @staticmethod
    def backward(ctx, grad_grad):
        x, grad_output = ctx.saved_tensors
        if not grad_grad.any():  # a branch on the value of the gradient it gets
            return torch.zeros_like(x), torch.zeros_like(x)
        return 2 * grad_output * grad_grad, 2 * x * grad_grad


class SquareHandWrittenSkipsZero(SquareHandWrittenView):
    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return _SquareBackwardSkipsZero.apply(x, grad_output)


def test_plain_torch_item_in_backward_fails_on_batched_gradients():
    (x,) = _inputs((5,))
    batch = torch.randn(2, 5, dtype=torch.float64)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(
            SquareSkipsZeroGrad.apply(x), x, batch, is_grads_batched=True
        )
    with pytest.raises(GradcheckError):
        gradcheck(SquareSkipsZeroGrad.apply, (x,), check_batched_grad=True)
    assert gradcheck(SquareSkipsZeroGrad.apply, (x,))
    assert gradcheck(SquareNoGuard.apply, (x,), check_batched_grad=True)
    # At order 2: the backward of backward branches; the backward itself is fine.
    assert gradcheck(SquareHandWrittenSkipsZero.apply, (x,), check_batched_grad=True)
    with pytest.raises(GradcheckError):
        gradgradcheck(SquareHandWrittenSkipsZero.apply, (x,), check_batched_grad=True)
    assert gradgradcheck(SquareHandWrittenSkipsZero.apply, (x,))
    assert gradgradcheck(SquareHandWrittenReshape.apply, (x,), check_batched_grad=True)


def test_plain_torch_a_vmap_rule_for_torch_func_is_not_one_for_batched_gradients():
    # The tutorial's modern Cube: its NumPy backward has a hand-written vmap staticmethod.
    from double_backward.functions.setup_context_style import Cube

    (x,) = _inputs((3, 2))
    assert torch.func.jacrev(Cube.apply)(x.detach()).shape == (3, 2, 3, 2)
    with pytest.raises(GradcheckError, match="batched gradient"):
        gradcheck(Cube.apply, (x,), check_batched_grad=True)
    report = check(Cube.apply, x.detach())
    assert report.ok, str(report)
    assert report.torch_func["jacrev (vmap over vjp)"] == "works"
    assert report.torch_func["hessian (vmap over vjp of grad)"] == "works"
    assert report.results["incoming grads"].endswith("; batched: see note")
    (note,) = [n for n in report.notes if "batched incoming gradients" in n]
    assert note.startswith("backward cannot run") and "order 1:" in note


@pytest.mark.parametrize(("fn", "order"), [(SquareSkipsZeroGrad, 1),
                                           (SquareHandWrittenSkipsZero, 2)])  # fmt: skip
def test_batched_gradients_are_a_note_by_default_and_a_problem_when_required(fn, order):
    x = torch.randn(4, 3)
    report = check(fn.apply, x)
    assert report.ok, str(report)
    assert report.results["incoming grads"].endswith("; batched: see note")
    (note,) = [n for n in report.notes if "batched incoming gradients" in n]
    assert "require_batched_grad=True" in note and "torch.where" in note
    assert f"order {order}:" in note and f"order {3 - order}:" not in note
    required = check(fn.apply, x, require_batched_grad=True)
    assert required.problem_names() == {"batched-incoming-gradient"}, str(required)
    assert ".item()" in required.problems[0].diagnosis
    assert required.results["incoming grads"] == "FAILED"


@pytest.mark.parametrize("fn", [SquareNoGuard, SquareHandWrittenReshape])
def test_the_twins_without_a_branch_run_batched(fn):
    report = check(fn.apply, torch.randn(4, 3), require_batched_grad=True)
    assert report.ok, str(report)
    assert report.results["incoming grads"] == (
        "passed: transposed, expanded, missing, batched (orders 1, 2)"
    )


def test_the_command_line_makes_batched_gradients_a_problem_on_request(capsys):
    target = f"{__name__}:SquareSkipsZeroGrad"
    assert main([target, "--shape", "4,3"]) == 0
    assert main([target, "--shape", "4,3", "--require-batched-grad"]) == 1
    assert "[batched-incoming-gradient]" in capsys.readouterr().out


# -- every mode at once on builtins, and the cost ---------------------------------------------


@pytest.mark.parametrize("fn", [torch.sin, torch.nn.functional.softmax.__wrapped__
                                if hasattr(torch.nn.functional.softmax, "__wrapped__")
                                else lambda x: torch.softmax(x, -1)])  # fmt: skip
def test_builtins_pass_every_mode(fn):
    report = check(fn, torch.randn(3, 4))
    assert report.ok, str(report)
    assert report.results["incoming grads"] == (
        "passed: transposed, expanded, missing, batched (orders 1, 2)"
    )


def test_the_modes_feed_what_they_say_transposed_expanded_none_and_batched():
    seen = []

    class SquareRecords(
        SquareNoneSafe
    ):  # set_materialize_grads(False): None arrives as is
        @staticmethod
        def backward(ctx, grad_output):
            (x,) = ctx.saved_tensors
            if grad_output is None:
                seen.append("none")
                return None
            try:
                grad_output.sum().item()  # a batched tensor has no single value
            except RuntimeError:
                seen.append("batched")
            if 0 in grad_output.stride():
                seen.append("expanded")
            elif not grad_output.is_contiguous():
                seen.append("non-contiguous")
            return grad_output * 2 * x

    assert check(SquareRecords.apply, torch.randn(4, 3)).ok
    assert {"none", "batched", "expanded", "non-contiguous"} <= set(seen)
