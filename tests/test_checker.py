"""double_backward.check: no false alarm on correct Functions, the right name for each failure."""

from __future__ import annotations

import pytest
import torch

from double_backward import (
    Cube,
    Exp,
    SinhBad,
    Square,
    check,
    sinh,
)
from double_backward.checker import DOCS_URL, PAGES, main
from double_backward.functions import failures, setup_context_style
from double_backward.functions.higher_orders import Cos, Sin

CORRECT = [
    pytest.param(Square.apply, id="Square"),
    pytest.param(Exp.apply, id="Exp"),
    pytest.param(sinh, id="Sinh"),
    pytest.param(Cube.apply, id="Cube"),
    pytest.param(setup_context_style.Square.apply, id="modern.Square"),
    pytest.param(setup_context_style.Exp.apply, id="modern.Exp"),
    pytest.param(setup_context_style.Cube.apply, id="modern.Cube"),
    pytest.param(Sin.apply, id="Sin"),
    pytest.param(Cos.apply, id="Cos"),
]

BROKEN = [
    pytest.param(SinhBad.apply, "stashed-on-ctx", id="stashed-on-ctx"),
    pytest.param(
        failures.SinhSavesIntermediate.apply,
        "saved-intermediate",
        id="saved-intermediate",
    ),
    pytest.param(
        failures.SinhNonDifferentiableExtras.apply,
        "non-differentiable-outputs",
        id="non-differentiable-outputs",
    ),  # fmt: skip
    pytest.param(
        failures.sinh_drops_extra_grads, "wrong-second-derivative", id="dropped-grads"
    ),
    pytest.param(failures.SquareDetachesInBackward.apply, "no-graph", id="detached"),
    pytest.param(
        failures.SquareOnceDifferentiable.apply, "once-differentiable", id="once"
    ),
]


@pytest.fixture
def x():
    torch.manual_seed(0)
    return torch.randn(3, 2)


@pytest.mark.parametrize("fn", CORRECT)
def test_correct_functions_have_no_problem(fn, x):
    report = check(fn, x, third_order=True)
    assert report.ok, str(report)
    assert report.results["gradgradcheck"] == "passed"
    assert report.results["third order"] == "passed"
    assert report.results["grad graph reaches inputs"] == "yes"


@pytest.mark.parametrize(("fn", "problem"), BROKEN)
def test_each_broken_function_gets_exactly_its_problem(fn, problem, x):
    report = check(fn, x)
    assert report.problem_names() == {problem}, str(report)
    assert not report.ok
    (found,) = report.problems
    assert found.url.startswith(DOCS_URL) and found.url.endswith(PAGES[found.page])
    assert found.diagnosis in str(report)


def test_forward_over_reverse_agrees_for_modern_functions_and_is_skipped_for_old_ones(
    x,
):
    modern = check(setup_context_style.Cube.apply, x)
    assert modern.results["Hessian-vector products"] == "agree"
    assert modern.torch_func == {
        "vmap": "passed",
        "jacrev": "passed",
        "hessian": "passed",
    }
    old = check(Cube.apply, x)
    assert old.results["Hessian-vector products"].startswith("skipped")
    assert "setup_context staticmethod" in old.torch_func["vmap"]
    assert old.ok  # torch.func support is reported, not required


def test_a_wrong_jvp_is_caught_by_comparing_hessian_vector_products(x):
    class WrongJvp(setup_context_style.Square):
        @staticmethod
        def jvp(ctx, x_tangent):
            (saved,) = ctx.saved_tensors
            return 3 * saved * x_tangent  # should be 2x

    report = check(WrongJvp.apply, x)
    assert report.problem_names() == {"forward-mode-mismatch"}


def test_a_wrong_first_derivative_is_reported_before_anything_else(x):
    class WrongBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t**2

        @staticmethod
        def backward(ctx, grad_out):
            (t,) = ctx.saved_tensors
            return grad_out * 3 * t

    report = check(WrongBackward.apply, x)
    assert report.problem_names() == {"first-order"}
    assert "gradgradcheck" not in report.results


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("not callable", torch.ones(1)), "'fn' must be callable"),
        ((Square.apply,), "one or more example input tensors"),
        ((Square.apply, [1.0]), "one or more example input tensors"),
        ((Square.apply, torch.ones(2, dtype=torch.int64)), "floating-point"),
    ],
)
def test_bad_arguments_say_what_was_expected(args, message):
    with pytest.raises(TypeError, match=message):
        check(*args)


def test_command_line_exit_status_and_report(capsys):
    assert main(["double_backward:Square", "--shape", "3,3"]) == 0
    assert "No problem found" in capsys.readouterr().out
    assert main(["double_backward:SinhBad", "--shape", "2"]) == 1
    output = capsys.readouterr().out
    assert "[stashed-on-ctx]" in output and "half_exp_x" in output


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["double_backward.Square"], "expected module:Function"),
        (
            ["double_backward:__version__"],
            "neither a torch.autograd.Function nor callable",
        ),
    ],
)
def test_command_line_rejects_bad_targets(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_command_line_rejects_a_bad_shape(capsys):
    with pytest.raises(SystemExit):
        main(["double_backward:Square", "--shape", "3,x"])
    assert "sizes separated by commas" in capsys.readouterr().err
