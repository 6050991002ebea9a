"""The checker on a corpus of Functions modelled on real projects: no false alarm, no miss,
no crash, the right cause.

Whether each Function's double backward works is decided here by independent means, never by
the checker: its first and second derivatives (with an incoming gradient that requires grad,
so mixed terms count) are compared with those of a native-torch twin computing the same
outputs, and its own ``gradgradcheck`` must agree with that comparison.
"""

from __future__ import annotations

import pytest
import torch
from torch.autograd.gradcheck import gradgradcheck

from double_backward.checker import check

from .checker_corpus import CASES, Case


def _floating(case: Case) -> list[int]:
    if case.wrt is not None:
        return list(case.wrt)
    return [
        i
        for i, a in enumerate(case.args)
        if torch.is_tensor(a) and (a.is_floating_point() or a.is_complex())
    ]


def _differentiable_outputs(output) -> list[torch.Tensor]:
    leaves = output if isinstance(output, tuple) else (output,)
    return [
        o
        for o in leaves
        if torch.is_tensor(o) and (o.is_floating_point() or o.is_complex()) and o.requires_grad
    ]


def _derivatives(fn, case: Case, seed: int = 0):
    """First derivatives and a second-order product (HVP plus mixed terms) of ``fn``."""
    torch.manual_seed(seed)
    slots = _floating(case)
    args = list(case.args)
    for i in slots:
        args[i] = case.args[i].detach().clone().requires_grad_()
    leaves = [args[i] for i in slots]
    cloned = [a.clone() if i in slots else a for i, a in enumerate(args)]
    outputs = _differentiable_outputs(fn(*cloned, **case.kwargs))
    vs = [torch.randn_like(o).requires_grad_() for o in outputs]
    firsts = torch.autograd.grad(
        outputs,
        leaves,
        vs,
        create_graph=True,
        allow_unused=True,
        materialize_grads=True,
    )
    us = [torch.randn_like(x) for x in leaves]
    dot = sum(_real_dot(f, u) for f, u in zip(firsts, us, strict=True))
    if (
        not dot.requires_grad
    ):  # a constant first derivative: all second derivatives are 0
        seconds = [torch.zeros_like(t) for t in [*leaves, *vs]]
    else:
        seconds = torch.autograd.grad(
            dot, [*leaves, *vs], allow_unused=True, materialize_grads=True
        )
    return [f.detach() for f in firsts], [s.detach() for s in seconds]


def _real_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Re(sum(conj(a) b)): the derivative of a real loss in direction b (complex as pairs)."""
    if a.is_complex():
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    return (a * b).sum()


def _verdict(case: Case) -> str:
    """'ok', 'first-order' or 'second-order', by comparison with the native twin."""
    first_native, second_native = _derivatives(case.native, case)
    try:
        first, second = _derivatives(case.fn, case)
    except (RuntimeError, TypeError):  # TypeError: state a backward cleared (DGL)
        return (
            "second-order"  # double backward raised (the first backward works, below)
        )
    tol = {"rtol": 1e-4, "atol": 1e-5} if case.args[0].dtype == torch.float32 else {}
    if not all(
        torch.allclose(a, b, **tol) for a, b in zip(first, first_native, strict=True)
    ):
        return "first-order"
    if not all(
        torch.allclose(a, b, **tol) for a, b in zip(second, second_native, strict=True)
    ):
        return "second-order"
    return "ok"


def _case(case_id: str) -> Case:
    (case,) = [c for c in CASES if c.id == case_id]
    return case


DOUBLE_BACKWARD_CASES = [c for c in CASES if c.native is not None]
SECOND_ORDER_PROBLEMS = {
    "stashed-on-ctx", "saved-intermediate", "non-differentiable-outputs",
    "wrong-second-derivative", "no-graph", "once-differentiable", "out-in-backward",
    "non-finite-second-derivative", "backward-clears-state", "modifies-incoming-gradient",
}  # fmt: skip
# A backward not linear in grad_out gives a wrong first derivative for some signed grad_out.
FIRST_ORDER_PROBLEMS = {"first-order", "backward-not-linear"}


def test_the_corpus_is_large_enough_and_has_both_kinds():
    assert len(CASES) >= 30
    assert sum(not c.problems for c in CASES) >= 20
    assert sum(bool(c.problems) for c in CASES) >= 10


@pytest.mark.parametrize("case", DOUBLE_BACKWARD_CASES, ids=lambda c: c.id)
def test_expected_verdicts_hold_by_independent_means(case):
    """The expectation written in the corpus is what the native comparison shows."""
    if case.id in ("reentrant-checkpoint",):
        with pytest.raises(RuntimeError, match=r"incompatible with \.grad\(\)"):
            _derivatives(case.fn, case)
        return
    verdict = _verdict(case)
    if case.problems & SECOND_ORDER_PROBLEMS:
        assert verdict == "second-order"
    elif case.problems & FIRST_ORDER_PROBLEMS:
        assert verdict == "first-order"
    else:  # correct for double backward (a wrong jvp is forward mode only)
        assert verdict == "ok"


@pytest.mark.parametrize(
    "case", [c for c in DOUBLE_BACKWARD_CASES
             if c.args[0].dtype in (torch.float64, torch.complex128)
             and c.args[0].numel() <= 200  # full-mode Jacobians; larger ones: native twin
             and c.id not in ("reentrant-checkpoint", "wrong-first-derivative")],
    ids=lambda c: c.id,
)  # fmt: skip
def test_gradgradcheck_agrees_with_the_native_comparison(case):
    slots = _floating(case)

    def fn(*xs):
        args = list(case.args)
        for i, x in zip(slots, xs, strict=True):
            args[i] = x.clone()
        return tuple(_differentiable_outputs(case.fn(*args, **case.kwargs)))

    inputs = tuple(case.args[i].detach().clone().requires_grad_() for i in slots)
    try:
        passed = gradgradcheck(fn, inputs, raise_exception=False)
    except (RuntimeError, TypeError):
        passed = False
    assert passed == (not case.problems & SECOND_ORDER_PROBLEMS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_checker_names_exactly_the_expected_problems(case):
    report = check(case.fn, *case.args, **case.options, kwargs=case.kwargs)
    assert report.problem_names() == set(case.problems), str(report)
    assert str(report)  # renders


def test_a_correct_relu_gets_a_plain_zero_second_derivative_note():
    case = _case("relu-mask")
    report = check(case.fn, *case.args)
    assert any(
        "second derivative with respect to itself is zero" in n for n in report.notes
    )


def test_a_bilinear_function_is_not_said_to_have_a_zero_second_derivative():
    # matmul's second derivative is mixed only: each note speaks of one input by itself.
    case = _case("matmul")
    notes = check(case.fn, *case.args).notes
    assert len(notes) == 2
    assert (
        "gradient with respect to argument 1 has no graph back to argument 1"
        in notes[1]
    )
    assert "mixed terms were still checked" in notes[1]


def test_integer_tensors_are_never_blamed():
    # Saved int64 indices and an int64 index argument: neither differentiated nor named as
    # saved without history; an int64 output is only said to be left out.
    for case_id in ("sort-index-output", "gather-int-index"):
        case = _case(case_id)
        report = check(case.fn, *case.args)
        assert "int64" not in report.results["inputs"]
        saying_int = [note for note in report.notes if "int64" in note]
        assert all("left out of the checks" in note for note in saying_int), str(report)
    case = _case("sort-index-output")
    assert any(
        "output 1 is an int64 tensor" in n for n in check(case.fn, *case.args).notes
    )


def test_a_saved_float_mask_that_breaks_nothing_is_a_note():
    case = _case("relu-saved-float-mask")
    report = check(case.fn, *case.args)
    assert report.ok
    assert any("saved tensor #0 of ReLUSavedMask" in note for note in report.notes)


def test_causes_name_each_tensor_where_saved_dtype_and_shape():
    case = _case("swish-stashed-sigmoid")
    (problem,) = check(case.fn, *case.args).problems
    assert "ctx.sig in SwishStashed (float64, shape (3, 4))" in problem.diagnosis
    case = _case("gallery-saved-intermediate")
    (problem,) = check(case.fn, *case.args).problems
    assert "saved tensor #1 of SinhSavesIntermediate (float64, shape (3, 4))" in (
        problem.diagnosis
    )


def test_non_floating_outputs_are_left_out_with_a_note():
    case = _case("numpy-and-number-outputs")
    report = check(case.fn, *case.args)
    assert report.ok
    assert any("output 1 is a NumPy array" in note for note in report.notes)
    assert any("output 2 is a float" in note for note in report.notes)


def test_a_float32_only_function_is_checked_in_float32_with_a_note():
    case = _case("float32-only")
    report = check(case.fn, *case.args)
    assert report.ok, str(report)
    assert "float32" in report.results["inputs"]
    assert any("refused torch.float64" in note for note in report.notes)


def test_an_error_raised_by_the_function_is_reported_with_its_message():
    case = _case("raises-in-forward")
    (problem,) = check(case.fn, *case.args).problems
    assert "ValueError: Needs2D: expected a 2-D input, got 1-D" in problem.diagnosis
    case = _case("reentrant-checkpoint")
    (problem,) = check(case.fn, *case.args).problems
    assert "incompatible with .grad()" in problem.diagnosis


def test_the_gallerys_torch_func_failures_are_reported_where_they_fail():
    # Double backward works for both (shown above); what fails is a torch.func transform.
    vmap_case = _case("gallery-numpy-under-vmap")
    report = check(vmap_case.fn, *vmap_case.args)
    assert report.ok and report.torch_func["vmap"].startswith("not supported")
    assert report.torch_func["vjp (reverse mode)"] == "works"
    jvp_case = _case("gallery-without-jvp")
    report = check(jvp_case.fn, *jvp_case.args)
    assert (
        report.ok
        and "must implement the jvp" in report.torch_func["jvp (forward mode)"]
    )
    assert report.torch_func["vmap"] == "works"


def test_the_cases_without_a_twin_fail_as_their_expectation_says():
    # Established by calling them, without the checker.
    with pytest.raises(ValueError, match="expected a 2-D input"):
        _case("raises-in-forward").fn(*_case("raises-in-forward").args)
    output = _case("returns-only-numpy").fn(*_case("returns-only-numpy").args)
    assert not torch.is_tensor(output)
    case = _case("log-outside-its-domain")
    assert torch.isnan(case.fn(*case.args)).all()
