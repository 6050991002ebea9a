"""double_backward.check: its options, every stage's verdict, the report, and the command line.

The corpus of real-world patterns is in test_checker_corpus.py; here each case is built to
reach one stage, and its expected verdict follows from how it is written (and, where it is
not obvious, from gradgradcheck run here).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from torch.autograd.gradcheck import gradgradcheck

from double_backward import (
    Cube,
    Exp,
    SinhBad,
    Square,
    check,
    sinh,
)
from double_backward.checker import DOCS_URL, PAGES, Problem, main
from double_backward.functions import failures, setup_context_style
from double_backward.functions.higher_orders import Cos, Sin
from double_backward.testing import assert_supports_double_backward

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
    ),  # fmt: skip
    pytest.param(
        failures.SinhNonDifferentiableExtras.apply,
        "non-differentiable-outputs",
        id="non-differentiable-outputs",
    ),  # fmt: skip
    pytest.param(
        failures.sinh_drops_extra_grads, "wrong-second-derivative", id="dropped-grads"
    ),  # fmt: skip
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
def test_correct_functions_have_no_problem_to_third_order(fn, x):
    report = check(fn, x, third_order=True)
    assert report.ok, str(report)
    assert report.results["gradgradcheck, point 1 (yours)"] == "passed"
    assert report.results["gradgradcheck, point 2"] == "passed"
    assert report.results["third order"] == "passed"
    assert "No problem found" in str(report)


@pytest.mark.parametrize(("fn", "problem"), BROKEN)
def test_each_broken_function_gets_exactly_its_problem(fn, problem, x):
    report = check(fn, x)
    assert report.problem_names() == {problem}, str(report)
    assert not report.ok
    (found,) = report.problems
    assert found.url.startswith(DOCS_URL) and found.url.endswith(PAGES[found.page])
    assert " ".join(found.diagnosis.split()) in " ".join(str(report).split())


def test_dropped_extra_gradients_are_named_even_behind_a_wrapper(x):
    (problem,) = check(failures.sinh_drops_extra_grads, x).problems
    assert "SinhDropsExtraGrads (3 outputs) has several outputs" in problem.diagnosis


def test_an_error_without_a_message_is_named_by_its_type(x):
    def silent(t):
        raise KeyError

    assert "KeyError." in check(silent, x).problems[0].diagnosis


def test_a_stage_of_the_checker_that_fails_is_a_note_not_a_crash(x, monkeypatch):
    from double_backward import checker

    def broken(*args):
        raise RuntimeError("simulated")

    for stage in ("_structure", "_jvp_agreement", "_torch_func_support"):
        monkeypatch.setattr(checker, stage, broken)
    report = check(Square.apply, x)
    assert report.ok
    assert sum("RuntimeError: simulated" in note for note in report.notes) == 3


def test_the_page_keys_others_link_to_exist():
    assert PAGES["custom-ops"] == "auto_examples/plot_17_custom_ops.html"
    assert PAGES["cpp"] == "auto_examples/plot_18_cpp_extension.html"
    assert PAGES["compile"] == "auto_examples/plot_19_torch_compile.html"
    assert PAGES["compatibility"] == "compatibility.html"


def test_torch_func_findings_are_reported_and_link_to_the_compatibility_page(x):
    modern = check(setup_context_style.Cube.apply, x)
    assert modern.results["forward-over-reverse HVP"] == "agree"
    assert modern.results["forward vs reverse mode"] == "agree"
    assert set(modern.torch_func.values()) == {"works"}
    old = check(Cube.apply, x)
    assert old.results["forward-over-reverse HVP"].startswith("skipped")
    assert "setup_context staticmethod" in old.torch_func["vmap"]
    assert old.ok  # torch.func support is reported, not required
    assert DOCS_URL + PAGES["compatibility"] in str(old)


# -- each stage ---------------------------------------------------------------------------


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
    assert not any(key.startswith("gradgradcheck") for key in report.results)


class _CubeGrad(torch.autograd.Function):
    """g = 3x²·grad_out, the backward of a cube; ``mode`` selects a flaw of its own backward."""

    @staticmethod
    def forward(ctx, grad_out, t, mode):
        ctx.save_for_backward(grad_out, t)
        ctx.mode = mode
        return 3 * t**2 * grad_out

    @staticmethod
    def backward(ctx, gg):
        grad_out, t = ctx.saved_tensors
        if ctx.mode == "raises":
            raise NotImplementedError("no second derivative for this kernel yet")
        if ctx.mode == "wrong":
            return gg * 3 * t**2, gg * grad_out * 5 * t, None  # 5 should be 6
        # "detached": right values, but no graph, so the third derivative is lost
        t = t.detach()
        return gg * 3 * t**2, gg * grad_out.detach() * 6 * t, None


def _cube_with(mode):
    class CubeWith(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t**3

        @staticmethod
        def backward(ctx, grad_out):
            (t,) = ctx.saved_tensors
            return _CubeGrad.apply(grad_out, t, mode)

    return CubeWith.apply


def test_a_silently_wrong_second_derivative_is_caught(x):
    fn = _cube_with("wrong")
    assert not gradgradcheck(fn, (x.double().requires_grad_(),), raise_exception=False)
    (problem,) = check(fn, x).problems
    assert problem.name == "wrong-second-derivative"
    assert "silently wrong" in problem.diagnosis


def test_double_backward_raising_is_reported_with_its_message(x):
    (problem,) = check(_cube_with("raises"), x).problems
    assert problem.name == "double-backward-raised"
    assert (
        "NotImplementedError: no second derivative for this kernel yet"
        in problem.diagnosis
    )


def test_a_missing_third_derivative_is_caught_only_when_asked(x):
    fn = _cube_with("detached")
    assert check(fn, x).ok  # the second derivative is right
    report = check(fn, x, third_order=True)
    assert report.problem_names() == {"third-order"}


def test_the_third_derivative_of_a_piecewise_linear_function_is_zero(x):
    from .checker_corpus import ReLUMask

    report = check(ReLUMask.apply, x, third_order=True)
    assert report.ok
    assert report.results["third order"] == "passed (the first derivative is constant)"


def test_non_finite_outputs_are_said_plainly():
    report = check(torch.log, -torch.rand(3) - 0.5)
    assert report.problem_names() == {"non-finite"}
    assert "NaN or inf" in str(report) and report.problems[0].url == ""


def test_a_function_returning_nothing_differentiable_is_a_problem():
    report = check(lambda t: t.detach() * 2, torch.randn(3))
    assert report.problem_names() == {"no-differentiable-output"}
    assert any("does not require grad" in note for note in report.notes)


def test_suspicious_patterns_that_pass_are_notes(x):
    class ScaleOnCtx(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.scale = torch.tensor(
                2.0, dtype=t.dtype
            )  # on ctx, but the Function is linear
            copy = t.detach() * 1
            ctx.mark_non_differentiable(copy)
            ctx.save_for_backward(copy)  # saved, marked, never differentiated through
            return t * 2, copy

        @staticmethod
        def backward(ctx, grad, _):
            return grad * ctx.scale

    report = check(ScaleOnCtx.apply, x)
    assert report.ok, str(report)
    notes = " ".join(report.notes)
    assert "ctx.scale in ScaleOnCtx (float64, shape ())" in notes
    assert "marked non-differentiable and saved" in notes


# -- arguments ----------------------------------------------------------------------------


def weighted_sum(t, *, weight, scale=1.0, dim=0):
    return Square.apply(t * weight).sum(dim) * scale


def test_keyword_tensors_numbers_and_wrt():
    t, w = torch.randn(3, 2), torch.rand(3, 2)
    both = check(weighted_sum, t, weight=w, scale=2.0, dim=1)
    assert both.ok, str(both)
    assert both.results["inputs"].startswith(
        "argument 0: float64, shape (3, 2), keyword 'weight'"
    )
    only_t = check(weighted_sum, t, weight=w, wrt=0)
    assert only_t.results["inputs"] == "argument 0: float64, shape (3, 2)"
    by_name = check(weighted_sum, t, weight=w, wrt=("weight",))
    assert by_name.results["inputs"] == "keyword 'weight': float64, shape (3, 2)"


def test_more_points_and_points_that_cannot_be_used(x):
    assert check(Square.apply, x, points=3).results["points checked"] == "3"
    given = x.double()

    def only_at_the_given_point(t):
        if not torch.allclose(
            t.detach(), given, atol=1e-3
        ):  # allows finite differences
            raise ValueError("outside the data it was fitted on")
        return Square.apply(t)

    report = check(only_at_the_given_point, x)
    assert report.ok and report.results["points checked"] == "1"
    assert any("point 2" in n and "outside the data" in n for n in report.notes)

    def nan_elsewhere(t):
        same = torch.allclose(t.detach(), given, atol=1e-3)
        return Square.apply(t) * (1.0 if same else float("nan"))

    report = check(nan_elsewhere, x)
    assert report.ok and any("NaN or inf" in note for note in report.notes)


def test_fast_mode_by_size_or_by_choice(x):
    assert "fast mode" in check(Square.apply, torch.randn(2000)).results["inputs"]
    assert "fast mode" not in check(Square.apply, x).results["inputs"]
    assert "fast mode" in check(Square.apply, x, fast_mode=True).results["inputs"]
    assert (
        "fast mode"
        not in check(
            Square.apply, torch.randn(1100), fast_mode=False, points=1
        ).results["inputs"]
    )


def test_float32_on_request(x):
    report = check(setup_context_style.Cube.apply, x, dtype=torch.float32)
    assert report.ok, str(report)
    assert report.results["inputs"] == "argument 0: float32, shape (3, 2)"


def test_a_function_that_refuses_every_dtype_is_reported_not_raised():
    def refuses(t):
        raise RuntimeError(f"unsupported dtype {t.dtype}")

    report = check(refuses, torch.randn(3, dtype=torch.float32))
    assert report.problem_names() == {"function-raised"}
    assert (
        "RuntimeError: unsupported dtype torch.float64" in report.problems[0].diagnosis
    )


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("not callable", torch.ones(1)), {}, TypeError, "'fn' must be callable"),
        ((Square.apply,), {}, TypeError, "no floating-point tensor"),
        ((Square.apply, [1.0]), {}, TypeError, "no floating-point tensor"),
        (
            (Square.apply, torch.ones(2, dtype=torch.int64)),
            {},
            TypeError,
            "no floating-point tensor",
        ),  # fmt: skip
        (
            (Square.apply, torch.ones(2), 3),
            {"wrt": 1},
            TypeError,
            "wrt=1 must name a floating-point tensor argument.*got an int",
        ),  # fmt: skip
        ((Square.apply, torch.ones(2)), {"wrt": "y"}, TypeError, "got a NoneType"),
        (
            (Square.apply, torch.ones(2)),
            {"dtype": torch.int32},
            TypeError,
            "dtype must be",
        ),
        ((Square.apply, torch.ones(2)), {"points": 0}, ValueError, "positive int"),
    ],
)
def test_bad_arguments_say_what_was_expected(args, kwargs, error, message):
    with pytest.raises(error, match=message):
        check(*args, **kwargs)


def test_the_report_as_json_data(x):
    data = check(SinhBad.apply, x).as_dict()
    assert data["ok"] is False and data["function"] == "SinhBad.apply"
    assert data["problems"][0]["name"] == "stashed-on-ctx"
    assert data["problems"][0]["url"].endswith(PAGES["intermediates"])
    json.dumps(data)  # plain data
    assert str(Problem("non-finite", "why", None)) == "[non-finite] why"


# -- for test suites ----------------------------------------------------------------------


def test_assert_supports_double_backward_returns_the_report_or_raises_with_it(x):
    assert assert_supports_double_backward(Square.apply, x).ok
    with pytest.raises(AssertionError, match=r"(?s)does not work.*\[stashed-on-ctx\]"):
        assert_supports_double_backward(SinhBad.apply, x)


# -- the command line ---------------------------------------------------------------------


def test_command_line_exit_status_and_report(capsys):
    assert main(["double_backward:Square", "--shape", "3,3"]) == 0
    assert "No problem found" in capsys.readouterr().out
    assert main(["double_backward:SinhBad", "--shape", "2"]) == 1
    output = capsys.readouterr().out
    assert "[stashed-on-ctx]" in output and "half_exp_x" in output


def test_command_line_domain_range_extra_arguments_and_json(capsys):
    assert (
        main(["tests.checker_corpus:SafeLog"]) == 1
    )  # normal inputs: log of negatives
    assert "[non-finite]" in capsys.readouterr().out
    assert main(["tests.checker_corpus:SafeLog", "--domain", "positive"]) == 0
    assert (
        main(["tests.checker_corpus:softplus", "--domain", "negative"]) == 0
    )  # a function
    assert (
        main(["tests.checker_corpus:SafeLog", "--range", "0.5,3", "--points", "1"]) == 0
    )
    assert (
        main(["tests.checker_corpus:Power", "--domain", "positive", "--arg", "2.5"])
        == 0
    )
    capsys.readouterr()
    argv = ["tests.checker_corpus:SumDim", "--shape", "3,4", "--arg", "1", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert (
        data["ok"] is True
        and data["results"]["inputs"] == "argument 0: float64, shape (3, 4)"
    )
    argv = ["tests.checker_corpus:Float32OnlyTanh", "--dtype", "float32", "--full"]
    assert main([*argv, "--third-order", "--seed", "3"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["double_backward.Square"], "expected module:Function"),
        (
            ["double_backward:__version__"],
            "neither a torch.autograd.Function nor callable",
        ),
        (["double_backward:Nope"], "cannot load double_backward:Nope"),
        (["no_such_module:F"], "No module named 'no_such_module'"),
        (["double_backward:Square", "--shape", "3,x"], "sizes separated by commas"),
        (["double_backward:Square", "--range", "1"], "two numbers low,high"),
        (["double_backward:Square", "--range", "2,1"], "finite low < high"),
        (["double_backward:Square", "--dtype", "int8"], "invalid choice"),
        (["double_backward:Square", "--kwarg", "2"], "NAME=VALUE"),
        (
            ["tests.checker_corpus:softplus", "--kwarg", "betta=2"],
            "keyword argument 'betta'",
        ),
        (["tests.checker_corpus:Needs2D"], "Needs2D: expected a 2-D input"),
        (["tests.checker_corpus:SumDim", "--arg", "x"], "function-raised"),
    ],
)
def test_command_line_usage_errors_exit_2(argv, message, capsys):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err + captured.out


def test_command_line_checks_at_one_point_at_least():
    assert main(["double_backward:Square", "--shape", "3", "--points", "0"]) == 0


def test_python_dash_m_runs_the_command_line():
    result = subprocess.run(
        [sys.executable, "-m", "double_backward.checker", "double_backward:SinhBad", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["problems"][0]["name"] == "stashed-on-ctx"
