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
from torch.autograd.gradcheck import gradcheck, gradgradcheck

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
    assert report.results["order 2, yours"].startswith("passed: gradgradcheck full")
    assert report.results["order 2, point 2"].startswith("passed")
    assert report.results["third order"] == "passed"
    assert str(report).splitlines()[0].endswith("supports double backward at the points checked")


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
    from double_backward.checker.function import causes, evidence

    def broken(*args):
        raise RuntimeError("simulated")

    monkeypatch.setattr(causes, "structure", broken)
    for stage in ("jvp_agreement", "torch_func_support"):
        monkeypatch.setattr(evidence, stage, broken)
    report = check(Square.apply, x)
    assert report.ok
    assert sum("RuntimeError: simulated" in note for note in report.notes) == 3


def test_the_page_keys_others_link_to_exist():
    assert PAGES["custom-ops"] == "auto_examples/beyond_python/plot_17_custom_ops.html"
    assert PAGES["cpp"] == "auto_examples/beyond_python/plot_18_cpp_extension.html"
    assert PAGES["compile"] == "auto_examples/beyond_python/plot_19_torch_compile.html"
    assert PAGES["compatibility"] == "compatibility.html"


def test_torch_func_findings_are_reported_and_link_to_the_compatibility_page(x):
    modern = check(setup_context_style.Cube.apply, x)
    assert modern.results["forward-mode HVP"] == "agree"
    assert modern.results["forward mode"] == "agree"
    assert set(modern.torch_func.values()) == {"works"}
    old = check(Cube.apply, x)
    assert old.results["forward mode"] == "skipped (no forward mode)"
    assert "forward-mode HVP" not in old.results  # one line says it
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
    assert not any(key.startswith("order 2") for key in report.results)


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
    # ctx.scale is a constant (the same whatever t): no note blames it.
    assert "ctx.scale" not in notes
    assert "marked non-differentiable and saved" in notes


# -- arguments ----------------------------------------------------------------------------


def weighted_sum(t, *, weight, scale=1.0, dim=0):
    return Square.apply(t * weight).sum(dim) * scale


def test_keyword_tensors_numbers_and_wrt():
    t, w = torch.randn(3, 2), torch.rand(3, 2)
    both = check(weighted_sum, t, kwargs={"weight": w, "scale": 2.0, "dim": 1})
    assert both.ok, str(both)
    assert both.results["inputs"].startswith(
        "argument 0: float64, shape (3, 2), keyword 'weight'"
    )
    only_t = check(weighted_sum, t, kwargs={"weight": w}, wrt=0)
    assert only_t.results["inputs"] == "argument 0: float64, shape (3, 2)"
    by_name = check(weighted_sum, t, kwargs={"weight": w}, wrt=("weight",))
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


def test_gradcheck_mode_by_size_or_by_choice(x):
    def first_order(report):
        return report.results["order 1, yours"]

    assert "gradcheck full" in first_order(check(Square.apply, x))
    assert "gradcheck fast" in first_order(check(Square.apply, torch.randn(500)))
    # Above the Jacobian limit, the directions alone: torch never builds a Jacobian.
    large = first_order(check(Square.apply, torch.randn(2000), points=1))
    assert "gradcheck" not in large and "2 VJPs" in large
    assert "gradcheck fast" in first_order(check(Square.apply, x, fast_mode=True))
    forced = check(Square.apply, torch.randn(150), fast_mode=False, points=1)
    assert "gradcheck full" in first_order(forced)


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
        ((Square.apply,), {}, TypeError, "no floating-point or complex tensor"),
        ((Square.apply, [1.0]), {}, TypeError, "no floating-point or complex tensor"),
        (
            (Square.apply, torch.ones(2, dtype=torch.int64)),
            {},
            TypeError,
            "no floating-point or complex tensor",
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
    assert "supports double backward" in capsys.readouterr().out.splitlines()[0]
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
    assert message in " ".join((captured.err + captured.out).split())


def test_command_line_checks_at_one_point_at_least():
    assert main(["double_backward:Square", "--shape", "3", "--points", "0"]) == 0


def test_python_dash_m_runs_the_command_line():
    result = subprocess.run(
        [sys.executable, "-m", "double_backward.checker", "double_backward:SinhBad", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["problems"][0]["name"] == "stashed-on-ctx"


# -- the Function's keywords, surrogate gradients, complex inputs -------------------------


class SeededDropout(torch.autograd.Function):
    """A Triton-tutorial-style dropout: the mask comes from a seed."""

    seeds_seen: list[int] = []

    @staticmethod
    def forward(ctx, t, p, seed):
        SeededDropout.seeds_seen.append(seed)
        generator = torch.Generator().manual_seed(seed)
        mask = (torch.rand(t.shape, generator=generator) > p).to(t.dtype) / (1 - p)
        ctx.save_for_backward(mask)
        return t * mask

    @staticmethod
    def backward(ctx, grad_out):
        (mask,) = ctx.saved_tensors
        return grad_out * mask, None, None


def seeded_dropout(t, *, p=0.5, seed):
    """The wrapper users call, with keywords (Function.apply takes positions)."""
    return SeededDropout.apply(t, p, seed)


def test_a_function_keyword_named_like_an_option_reaches_the_function(x):
    SeededDropout.seeds_seen.clear()
    report = check(seeded_dropout, x, kwargs={"seed": 3}, seed=0)
    assert report.ok, str(report)
    assert set(SeededDropout.seeds_seen) == {3}


def test_a_keyword_outside_kwargs_says_how_to_pass_it(x):
    with pytest.raises(TypeError, match=r"no option 'beta'.*kwargs=\{'beta': \.\.\.\}"):
        check(Square.apply, x, beta=2.0)
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        check(Square.apply, x, kwargs=[("beta", 2.0)])


def test_the_command_line_passes_a_seed_keyword_to_the_function(capsys):
    SeededDropout.seeds_seen.clear()
    argv = ["tests.test_checker:seeded_dropout", "--kwarg", "seed=7", "--seed", "1"]
    assert main(argv) == 0, capsys.readouterr()
    assert set(SeededDropout.seeds_seen) == {7}


class StraightThroughRound(torch.autograd.Function):
    """Straight-through rounding (quantisation-aware training): backward passes grad_out."""

    @staticmethod
    def forward(ctx, t):
        return torch.round(t)

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out


class SigmoidSurrogateStep(torch.autograd.Function):
    """A spiking neuron's step with a sigmoid surrogate (snnTorch-style), BROKEN: the
    surrogate's sigmoid is saved as an intermediate, so its derivative is lost."""

    @staticmethod
    def forward(ctx, t):
        ctx.save_for_backward(torch.sigmoid(4 * t))
        return (t > 0).to(t.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        (s,) = ctx.saved_tensors
        return grad_out * 4 * s * (1 - s)


def test_a_straight_through_estimator_needs_the_surrogate_mode(x):
    assert check(StraightThroughRound.apply, x).problem_names() == {"first-order"}
    report = check(StraightThroughRound.apply, x, surrogate_gradient=True)
    assert report.ok, str(report)
    assert "double backward consistent with the custom backward" in report.verdict


def test_the_surrogate_mode_checks_double_backward_against_the_custom_backward(x):
    t = x.double().requires_grad_()
    # Independent: gradgradcheck compares double backward with differences of backward.
    assert not gradgradcheck(SigmoidSurrogateStep.apply, (t,), raise_exception=False)
    report = check(SigmoidSurrogateStep.apply, x, surrogate_gradient=True)
    assert report.problem_names() == {"saved-intermediate"}, str(report)


def test_the_command_line_surrogate_gradient_flag(capsys):
    argv = ["tests.test_checker:StraightThroughRound", "--shape", "4"]
    assert main(argv) == 1
    assert main([*argv, "--surrogate-gradient"]) == 0


class ComplexSquare(torch.autograd.Function):
    """z ↦ z², holomorphic: the gradient is grad_out * conj(2z) (PyTorch's convention)."""

    @staticmethod
    def forward(ctx, z):
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx, grad_out):
        (z,) = ctx.saved_tensors
        return grad_out * (2 * z).conj()


class ComplexSquareNoConj(ComplexSquare):
    """BROKEN: forgets the conjugate, a classic mistake with complex inputs."""

    @staticmethod
    def backward(ctx, grad_out):
        (z,) = ctx.saved_tensors
        return grad_out * 2 * z


def test_complex_inputs_are_checked_in_pytorchs_convention():
    z = torch.randn(3, 2, dtype=torch.complex128, generator=torch.Generator().manual_seed(0))
    zz = z.clone().requires_grad_()
    assert gradgradcheck(ComplexSquare.apply, (zz,))  # independent verdicts
    assert not gradcheck(ComplexSquareNoConj.apply, (zz,), raise_exception=False)
    report = check(ComplexSquare.apply, z)
    assert report.ok, str(report)
    assert report.results["inputs"] == "argument 0: complex128, shape (3, 2)"
    assert check(ComplexSquareNoConj.apply, z).problem_names() == {"first-order"}
    large = torch.randn(3000, dtype=torch.complex128)
    assert check(ComplexSquare.apply, large, points=1).ok
    assert check(ComplexSquareNoConj.apply, large, points=1).problem_names() == {"first-order"}


# -- derived points, messages fitted to what was checked ----------------------------------


def test_a_failure_only_at_a_derived_point_is_shown_with_the_point_and_does_not_decide(x):
    given = x.double()

    class RightOnlyAtTheGivenPoint(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t**2

        @staticmethod
        def backward(ctx, grad_out):
            (t,) = ctx.saved_tensors
            # Away from the given point (beyond finite-difference steps), the derivative
            # of the gradient loses its graph: detached.
            near = torch.allclose(t.detach(), given, atol=1e-4)
            return grad_out * 2 * (t if near else t.detach())

    report = check(RightOnlyAtTheGivenPoint.apply, x)
    assert report.ok, str(report)
    (problem,) = report.derived_only
    assert "derived from your inputs" in problem.diagnosis
    assert "argument 0 = [" in problem.diagnosis  # the point, shown
    assert "a check failed at a derived point" in report.verdict
    assert "seen only at a point derived from your inputs" in str(report)


def test_derived_points_keep_a_positive_definite_input_positive_definite():
    generator = torch.Generator().manual_seed(0)
    m = torch.randn(4, 4, generator=generator, dtype=torch.float64)
    spd = m @ m.T + 3 * torch.eye(4, dtype=torch.float64)

    def cholesky(a):
        return torch.linalg.cholesky_ex((a + a.mT) / 2).L

    report = check(cholesky, spd, points=4)
    assert report.ok and report.results["points checked"] == "4", str(report)
    assert not report.derived_only


def test_built_in_operators_get_advice_about_built_ins(x, monkeypatch):
    import torch.nn.functional as F

    from double_backward.checker.function import evidence

    # hardsigmoid's double backward raises inside PyTorch on every tested release (the
    # built-ins table; pdist's did on 2.13 only): named as raised.
    report = check(F.hardsigmoid, torch.randn(4, 3))
    assert report.problem_names() == {"double-backward-raised"}
    assert report.problems[0].page == "builtins"
    # A forward-mode disagreement in a built-in is not blamed on a jvp staticmethod.
    monkeypatch.setattr(evidence, "jvp_agreement", lambda *args: "DISAGREE")
    monkeypatch.setattr(evidence, "hvp_agreement", lambda *args: "agree")
    (problem,) = check(torch.sin, x).problems
    assert "PyTorch's own operators" in problem.diagnosis
    assert "jvp staticmethod" not in problem.diagnosis
    (problem,) = check(lambda t: setup_context_style.Cube.apply(t) * 2, x).problems
    assert "a Function it calls" in problem.diagnosis
    (problem,) = check(setup_context_style.Cube.apply, x).problems
    assert problem.diagnosis.endswith("as backward.")


def test_complex_outputs_are_checked_not_dropped():
    report = check(torch.fft.fft, torch.randn(8))
    assert report.ok and not any("left out" in note for note in report.notes), str(report)


def test_the_setup_context_message_is_said_once_and_a_passing_report_is_short(x):
    from .checker_corpus import ReLUMask

    text = str(check(Cube.apply, x))
    assert text.count("setup_context") <= 1
    relu = str(check(ReLUMask.apply, x)).splitlines()
    assert relu[0] == "ReLUMask.apply: supports double backward at the points checked"
    # 15: one line more since the incoming-gradient modes (issue 37) have theirs
    assert len(relu) <= 15 and all(len(line) <= 79 or "read: " in line for line in relu)


class TakeRows(torch.autograd.Function):
    """x[index] with an int64 index tensor (torch_scatter / pytorch3d gather ops)."""

    @staticmethod
    def forward(ctx, t, index):
        ctx.save_for_backward(index)
        ctx.rows = t.shape[0]
        return t[index]

    @staticmethod
    def backward(ctx, grad_out):
        (index,) = ctx.saved_tensors
        return grad_out.new_zeros(ctx.rows, *grad_out.shape[1:]).index_add(0, index, grad_out), None


def take_rows_setup():
    """--setup: the arguments the options cannot describe."""
    return (torch.randn(4, 2, dtype=torch.float64), torch.tensor([3, 0, 0, 1]))


def test_the_command_line_takes_integer_tensors_and_a_setup_function(capsys):
    argv = ["tests.test_checker:TakeRows", "--shape", "4,2", "--arg-int-tensor", "0,2,1"]
    assert main(argv) == 0, capsys.readouterr()
    setup = ["--setup", "tests.test_checker:take_rows_setup"]
    assert main(["tests.test_checker:TakeRows", *setup]) == 0
    assert main(["tests.test_checker:TakeRows", "--arg-int-tensor", "0,x"]) == 2
    assert "integers separated by commas" in capsys.readouterr().err


def test_a_float32_only_function_gets_a_hint_about_dtype(capsys):
    assert main(["tests.checker_corpus:Float32OnlyTanh"]) == 2
    assert "try --dtype float32" in capsys.readouterr().err
    assert main(["tests.checker_corpus:Float32OnlyTanh", "--dtype", "float32"]) == 0
    assert main(["tests.checker_corpus:ComplexSquare", "--domain", "complex"]) == 0


def test_small_pieces_of_the_report_and_the_arguments():
    from double_backward.checker import Report
    from double_backward.checker.function import calling

    two = Report("f", problems=[Problem("a", "first thing. more"), Problem("b", "second")])
    assert two.verdict == "PROBLEM [a] first thing (+1 more)"
    assert calling.preview(torch.tensor([1 + 2j] * 5)) == "[1+2j, 1+2j, 1+2j, 1+2j, ...]"
    assert check(Square.apply, torch.randn(2000), third_order=True).results[
        "third order"
    ].startswith("skipped")


def softplus_setup():
    """--setup returning (args, kwargs)."""
    return (torch.randn(3, dtype=torch.float64),), {"beta": 2.0}


def test_the_command_line_setup_may_return_keywords_too():
    setup = ["--setup", "tests.test_checker:softplus_setup"]
    assert main(["tests.checker_corpus:softplus", *setup]) == 0


def test_watching_an_inherited_backward_leaves_the_class_as_it_was(x):
    class Child(failures.SinhSavesIntermediate):  # backward inherited, not its own
        pass

    report = check(Child.apply, x)
    assert report.problem_names() == {"saved-intermediate"}
    assert "backward" not in Child.__dict__
    assert "backward" in failures.SinhSavesIntermediate.__dict__


def test_opinfo_false_alarms_of_the_review_are_gone():
    import torch.nn.functional as F

    # embedding_bag's double backward raises NotImplementedError: "raised", not "no-graph"
    # (the weight enters linearly, which the no-graph rule would have blamed).
    index, offsets = torch.tensor([0, 2, 1, 3]), torch.tensor([0, 2])
    weight = torch.randn(5, 3, dtype=torch.float64).requires_grad_()
    out = F.embedding_bag(index, weight, offsets, mode="max")
    grad_out = torch.ones_like(out).requires_grad_()  # as in a gradient penalty
    (grad,) = torch.autograd.grad(out, weight, grad_out, create_graph=True)
    with pytest.raises(NotImplementedError):  # independent: torch itself refuses
        torch.autograd.grad(grad.sum(), grad_out)
    report = check(lambda w: F.embedding_bag(index, w, offsets, mode="max"), weight.detach())
    assert report.problem_names() == {"double-backward-raised"}
    # lu_solve passes at the user's point and at derived points (which keep the factors'
    # structure), as gradgradcheck says.
    a = torch.randn(3, 3, dtype=torch.float64) + 3 * torch.eye(3, dtype=torch.float64)
    lu, pivots = torch.linalg.lu_factor(a)
    b = torch.randn(3, 2, dtype=torch.float64)

    def solve(lu, b):
        return torch.linalg.lu_solve(lu, pivots, b)

    assert gradgradcheck(solve, (lu.clone().requires_grad_(), b.clone().requires_grad_()))
    report = check(solve, lu, b, points=3)
    assert report.ok and not report.derived_only, str(report)
