"""``check()``: call the Function, gather the evidence at each point, name the causes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..shared.report import Problem, Report
from . import causes, evidence, modes
from .calling import (
    PERTURBATION,
    Call,
    at_dtype,
    derived_point,
    describe,
    differentiable,
    function_name,
    is_custom_function,
    kind,
    preview,
    quietly,
    real_dtype,
    slots_of,
)  # fmt: skip
from .evidence import Failed, Settings

OPTIONS = (
    "kwargs", "wrt", "surrogate_gradient", "dtype", "points", "directions", "fast_mode",
    "third_order", "require_batched_grad", "seed", "name",
)  # fmt: skip


def check(
    fn: Callable[..., Any],
    *args: Any,
    kwargs: dict[str, Any] | None = None,
    wrt: tuple[int | str, ...] | list[int | str] | int | str | None = None,
    surrogate_gradient: bool = False,
    dtype: torch.dtype = torch.float64,
    points: int | None = None,
    directions: int = 2,
    fast_mode: bool | None = None,
    third_order: bool = False,
    require_batched_grad: bool = False,
    seed: int = 0,
    name: str | None = None,
    **unknown: Any,
) -> Report:
    """Check that ``fn`` (a Function's ``apply``, or any function calling one) supports
    double backward when called as ``fn(*args, **kwargs)``; return a
    :class:`~double_backward.checker.Report`.

    ``args`` are passed as they are: tensors of any dtype, numbers, tuples, ``None``. The
    Function's own keyword arguments go in ``kwargs={...}``, so that none of them can collide
    with an option of the checker (a Function may well take ``seed=``). The floating-point and
    complex tensors among them are differentiated (copied to ``dtype``, or its complex
    counterpart); ``wrt`` chooses which, by position or by key of ``kwargs``, e.g.
    ``check(fn, x, target, 2, wrt=(0,))``. Outputs that are not floating or complex tensors
    (indices, NumPy arrays, numbers) are left out, with a note.

    ``report.ok`` is true when no check failed at your inputs and there was evidence to
    decide: above gradcheck's size, if no random direction's central differences could decide
    (every one crosses a kink), the problem ``undecided`` says "could not decide at these
    inputs", with why and what to try, and ``ok`` is false. ``report.problems`` lists each
    failure with a ``diagnosis`` naming the cause and the ``url`` of the page that explains
    the fix; ``report.notes`` says what passed but deserves a look; ``print(report)`` opens
    with the verdict in one line.

    Options (keyword only):

    - ``surrogate_gradient``: the backward is deliberately not the derivative (a
      straight-through estimator, gradient reversal, a VQ-VAE codebook): the first derivative
      is taken as given, and the checks test that double backward is consistent with *your
      backward* (its derivative against central differences of it) and that backward is
      linear in its incoming gradient.
    - ``dtype``: float64 by default; float32 uses looser tolerances. If ``fn`` refuses
      ``dtype``, the check is retried in the dtype of your inputs, with a note.
    - ``points``: how many points to check at: your inputs, then points derived from them by
      a relative change of at most 1% (which keeps signs, intervals, definiteness). A failure
      seen only at a derived point is shown, with the point, but does not decide ``ok``. By
      default 2 while gradcheck runs, 1 above (the random directions are the evidence).
    - ``directions``: random signed directions per check and point (2: the chance of missing
      an error of 5% of the whole Hessian-vector product, in Frobenius norm, is at most
      2.5e-4, derived on the checker page; an error confined to a few elements of large
      inputs is a smaller share of the whole, and nothing is promised for it).
    - ``fast_mode``: gradcheck's mode. By default full mode up to 100 elements, fast mode
      while the Jacobians stay small, and above that the directional checks alone.
    - ``third_order``: also check the third derivative.
    - ``require_batched_grad``: make a backward that cannot run on batched incoming gradients
      (``torch.autograd.grad(..., is_grads_batched=True)``, gradcheck's
      ``check_batched_grad``) a problem; by default it is a note.

    Besides the values, the incoming gradients that real use feeds are fed at your inputs, to
    backward and to the backward of backward (``checker.function.modes``):
    transposed and expanded ones (a transpose or a sum downstream), missing ones (a loss that
    uses one output of several; gradcheck's ``check_undefined_grad``) and batched ones.
    - ``seed``: seeds the derived points, the directions and the weights of the outputs.
    - ``name``: the name the report shows (by default the Function's).
    """
    if unknown:
        raise TypeError(
            f"check() has no option {', '.join(map(repr, unknown))}; its options are "
            f"{', '.join(OPTIONS)}. Pass the Function's own keyword arguments as "
            f"kwargs={{{', '.join(f'{k!r}: ...' for k in unknown)}}}"
        )
    _validate(fn, kwargs, dtype, points, directions)
    kwargs = dict(kwargs or {})
    call = Call(fn, args, kwargs, slots_of(args, kwargs, wrt))
    report = Report(name or function_name(fn), surrogate_gradient=surrogate_gradient)

    called = _call_once(call, dtype, report)
    if called is None:
        return report
    inputs, outputs = called
    del called  # it would hold the outputs after they are freed below
    if (
        not _choose_outputs(call, outputs, report)
        or not _supported(call, outputs, report)
        or not _finite(call, outputs, report)
    ):
        return report
    dtype = real_dtype(inputs[0])
    numel_out = sum(outputs[i].numel() for i in call.kept)  # type: ignore[union-attr]
    numel_in = sum(x.numel() for x in inputs)
    settings = Settings(
        dtype=dtype, directions=directions, surrogate_gradient=surrogate_gradient,
        gradcheck_mode=evidence.gradcheck_mode(numel_in, numel_out, fast_mode),
        generator=torch.Generator(device="cpu").manual_seed(seed),  # draws are moved
    )  # fmt: skip
    report.results["inputs"] = ", ".join(
        f"{call.label(s)}: {describe(x)}" for s, x in zip(call.slots, inputs, strict=True)
    )
    found = _guarded(report, "graph",
                     lambda: causes.structure(call, inputs, outputs, is_custom_function(fn)),
                     causes.Structure())  # fmt: skip
    report.notes += [f"{node} is marked @once_differentiable (first-order only)."
                     for node in found.once_differentiable]  # fmt: skip
    # The outputs' weights: drawn when needed, from a generator of their own (the same draw
    # each time), and not held through the value checks, which read them only to explain a
    # failure: they are as large as the outputs.
    weights_of = evidence.drawer([outputs[i] for i in call.kept],  # type: ignore[misc]
                                 settings.generator)
    outputs = []  # their graph, as large as the outputs, is not needed again: freed

    if points is None:
        points = 1 if settings.gradcheck_mode == "none" else 2
    checked = _check_points(call, inputs, points, settings, found, weights_of, report)
    # The backwards the value checks keep (each as large as the inputs) are read by them
    # only: freed before the checks that follow. (settings.drawn holds generator states.)
    settings.backwards.clear()
    if settings.staircases:
        report.notes.append(
            f"{settings.staircases} direction(s) were decided at a finer step: at the "
            "larger, central differences crossed the jumps of a piecewise-constant function "
            "(a staircase, as round() makes, looks smooth with its own slope across many "
            "stairs); below the stairs it is flat, as its derivative says."
        )
    if not checked:
        return report
    weights = weights_of()
    _describe_passing(call, inputs, weights, found, report)
    if not surrogate_gradient:
        _compare_forward_mode(call, inputs, weights, settings, found, report)
    if third_order:
        _check_third_order(call, inputs, weights, settings, report)
    report.torch_func = _guarded(
        report, "torch.func",
        lambda: evidence.torch_func_support(call, inputs, weights, settings), {},
    )  # fmt: skip
    weights = []  # as large as the outputs, freed: the modes feed fixed patterns of their own
    _guarded(report, "incoming-gradient modes",
             lambda: modes.check_modes(call, inputs, settings, report, require_batched_grad))
    return report


# -- the steps -----------------------------------------------------------------------------


def _validate(fn: object, kwargs: object, dtype: object, points: object,
              directions: object) -> None:  # fmt: skip
    if not callable(fn):
        raise TypeError(f"check: 'fn' must be callable, e.g. MyFunction.apply, got {fn!r}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(
            f"check: kwargs must be a dict of the Function's keyword arguments, got {kind(kwargs)}"
        )
    if dtype not in evidence.TOLERANCES:
        raise TypeError(f"check: dtype must be one of {list(evidence.TOLERANCES)}, got {dtype!r}")
    for option, value in (("points", points), ("directions", directions)):
        if value is None and option == "points":
            continue
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"check: {option} must be a positive int, got {value!r}")


def _guarded(report: Report, stage: str, compute: Callable[[], Any], default: Any = None) -> Any:
    """Run one of the checker's own stages; if it fails, say so in a note, never crash."""
    try:
        return compute()
    except Exception as error:  # noqa: BLE001
        report.notes.append(
            f"the checker could not complete its {stage} stage: {evidence.message(error)}"
        )
        return default


def _try_outputs(call: Call, inputs: Sequence[torch.Tensor]
                 ) -> tuple[list[object], BaseException | None]:  # fmt: skip
    """Call the Function, noting the tensors it marks non-differentiable (which a wrapper
    such as ``lambda x: F.apply(x)[0]`` may hide from its outputs)."""
    ctx_class = torch.autograd.function.FunctionCtx
    original = ctx_class.mark_non_differentiable
    call.marked = []

    def mark_non_differentiable(ctx: Any, *tensors: torch.Tensor) -> None:
        call.marked += [(t.data_ptr(), t.shape) for t in tensors if isinstance(t, torch.Tensor)]
        original(ctx, *tensors)

    # Patched on the class for the length of this one call, restored in `finally`: not
    # thread-safe, so do not check Functions from several threads at once.
    ctx_class.mark_non_differentiable = mark_non_differentiable  # type: ignore[method-assign]
    try:
        with torch.enable_grad():
            return quietly(lambda: call.outputs(*inputs)), None
    except Exception as error:  # noqa: BLE001 - reported, with its message
        return [], error
    finally:
        ctx_class.mark_non_differentiable = original  # type: ignore[method-assign]


def _call_once(call: Call, dtype: torch.dtype, report: Report
               ) -> tuple[tuple[torch.Tensor, ...], list[object]] | None:  # fmt: skip
    """Call the Function at ``dtype``, or at the inputs' own dtype if it refuses ``dtype``."""
    given = call.given()
    inputs = tuple(at_dtype(x.detach(), dtype).requires_grad_() for x in given)
    outputs, error = _try_outputs(call, inputs)
    own = {real_dtype(x) for x in given}
    if error is not None and len(own) == 1 and dtype not in own:
        retry_dtype = own.pop()
        retry = tuple(x.detach().requires_grad_() for x in given)
        outputs, retry_error = _try_outputs(call, retry)
        if retry_error is None and retry_dtype in evidence.TOLERANCES:
            report.notes.append(
                f"the Function refused {dtype} inputs ({evidence.message(error, 160)}); checked "
                f"in {retry_dtype}, the dtype of your inputs, with its tolerances."
            )
            inputs, error = retry, None
    if error is not None:
        report.results["call"] = "raised"
        report.problems.append(Problem("function-raised", (
            f"calling the Function raised an error at your inputs, so nothing else was "
            f"checked: {evidence.message(error).rstrip('.')}. Check the arguments (positional "
            "and keyword) and their dtypes."
        ), None))  # fmt: skip
        return None
    report.results["call"] = "ok"
    return inputs, outputs


def _choose_outputs(call: Call, outputs: list[object], report: Report) -> bool:
    """Keep the floating and complex outputs that require grad; say why others are left out."""
    for index, out in enumerate(outputs):
        if differentiable(out) and out.requires_grad:  # type: ignore[union-attr]
            call.kept.append(index)
        elif out is None:
            continue
        elif differentiable(out):
            report.notes.append(
                f"output {index} ({describe(out)}) does not require grad (marked "  # type: ignore[arg-type]
                "non-differentiable, or detached): left out of the checks."
            )
        else:
            report.notes.append(
                f"output {index} is {kind(out)}, not a floating-point tensor: left out of "
                "the checks."
            )
    if not call.kept:
        report.problems.append(Problem("no-differentiable-output", (
            "no output is a floating-point or complex tensor that requires grad: there is "
            "nothing to differentiate once, let alone twice. Return torch tensors (not NumPy "
            "arrays) and do not mark the main output non-differentiable."
        )))  # fmt: skip
    return bool(call.kept)


#: Dtypes torch implements too few operators in to check derivatives there (torch.equal,
#: norms and most arithmetic raise "not implemented for 'ComplexHalf'").
UNSUPPORTED = {torch.complex32: "complex32 (torch.chalf)"}


def _supported(call: Call, outputs: list[object], report: Report) -> bool:
    """No kept output in a dtype the checks cannot compute in (complex32)."""
    bad = [(i, outputs[i].dtype) for i in call.kept  # type: ignore[union-attr]
           if outputs[i].dtype in UNSUPPORTED]  # type: ignore[union-attr]  # fmt: skip
    if bad:
        named = ", ".join(f"output {i} is {UNSUPPORTED[d]}" for i, d in bad)
        report.problems.append(Problem("unsupported-dtype", (
            f"{named}, a dtype torch implements too few operators in for derivatives to "
            "be compared there (torch.equal, norms, most arithmetic), so nothing was "
            "checked. Supported: float64 (the default), float32, float16 and bfloat16, and "
            "complex128 and complex64; check the Function computing in complex64 or "
            "complex128 (its cast to complex32 left out)."
        ), None))  # fmt: skip
    return not bad


def _non_finite(call: Call, outputs: list[object]) -> list[int]:
    return [i for i in call.kept if not torch.isfinite(outputs[i]).all()]  # type: ignore[arg-type]


def _finite(call: Call, outputs: list[object], report: Report) -> bool:
    bad = _non_finite(call, outputs)
    if bad:
        report.problems.append(Problem("non-finite", (
            f"output(s) {', '.join(map(str, bad))} contain NaN or inf at your inputs, so no "
            "derivative can be checked there. Choose inputs inside the Function's domain "
            "(e.g. positive values for a log: --domain positive on the command line)."
        ), None))  # fmt: skip
    return not bad


def _points(inputs: tuple[torch.Tensor, ...], count: int, s: Settings
            ) -> list[tuple[str, tuple[torch.Tensor, ...]]]:  # fmt: skip
    found = [("your inputs", inputs)]
    for number in range(2, count + 1):
        derived = tuple(derived_point(x.detach(), s.generator).requires_grad_() for x in inputs)
        found.append((f"point {number}", derived))
    return found


def _check_points(call: Call, inputs: tuple[torch.Tensor, ...], count: int, s: Settings,
                  found: causes.Structure, weights_of: Callable[[], list[torch.Tensor]],
                  report: Report) -> bool:
    """Every check at every point; False when a problem was found at your inputs."""  # fmt: skip
    checked = 0
    for where, at in _points(inputs, count, s):
        if at is not inputs:
            outputs, error = _try_outputs(call, at)
            if error is not None or _non_finite(call, outputs):
                why = f"the Function raised {evidence.message(error, 160)}" if error else (
                    "NaN or inf in the outputs there")  # fmt: skip
                report.notes.append(f"{where}, derived from your inputs, was skipped: {why}")
                continue
        checked += 1
        problem = _check_point(call, at, where, s, found, weights_of, report)
        if problem is None:
            continue
        if at is inputs:
            report.problems.append(problem)
            return False
        shown = "; ".join(f"{call.label(slot)} = {preview(x)}"
                          for slot, x in zip(call.slots, at, strict=True))  # fmt: skip
        report.derived_only.append(Problem(problem.name, (
            f"{problem.diagnosis} This point was derived from your inputs (x*(1+e), "
            f"|e| <= {PERTURBATION}) and every check passed at yours: {shown}."
        ), problem.page))  # fmt: skip
        break
    report.results["points checked"] = str(checked)
    return True


def _check_point(call: Call, at: tuple[torch.Tensor, ...], where: str, s: Settings,
                 found: causes.Structure, weights_of: Callable[[], list[torch.Tensor]],
                 report: Report) -> Problem | None:  # fmt: skip
    """The first-order, then the second-order checks at one point; the problem, if any."""
    where_short = "yours" if where == "your inputs" else where
    try:
        report.results[f"order 1, {where_short}"] = evidence.first_order(call, at, s)
    except Failed as failure:
        if failure.kind == "undecided":
            report.results[f"order 1, {where_short}"] = "UNDECIDED"
            return _undecided_problem(failure, where, s)
        report.results[f"order 1, {where_short}"] = "FAILED"
        if failure.kind == "raised":
            cleared = _guarded(report, "graph", lambda: causes.cleared_state(call, at), [])
            if cleared:
                return causes.clears_state_problem(cleared, f"{where}: {failure}")
        return modes.named_by_error(failure, 1, where) or _first_order_problem(failure, where)
    try:
        report.results[f"order 2, {where_short}"] = evidence.second_order(call, at, s)
    except Failed as failure:
        if failure.kind == "undecided":
            report.results[f"order 2, {where_short}"] = "UNDECIDED"
            return _undecided_problem(failure, where, s)
        report.results[f"order 2, {where_short}"] = "FAILED"
        _guarded(report, "graph", lambda: _read_failure(call, at, weights_of(), s, found))
        return modes.named_by_error(failure, 2, where) or causes.cause_of_second_order_failure(
            failure, found, where)  # fmt: skip
    return None


def _read_failure(call: Call, at: tuple[torch.Tensor, ...], weights: list[torch.Tensor],
                  s: Settings, found: causes.Structure) -> None:
    """What the graph and a watched backward say about a second-order failure."""  # fmt: skip
    found.cleared_state = causes.cleared_state(call, at)
    found.not_reaching = causes.not_reaching(call, at, weights)
    try:
        causes.watch_backward(call, at, found, weights)
        if len(at) > 1 and not found.used([*found.stashed, *found.saved_intermediates]):
            # Which terms are wrong: with several inputs, only a mixed one may be.
            found.untracked_terms = causes.untracked_terms(call, at, weights, s)
    except Exception:  # noqa: BLE001 - double backward may raise: the graph rules remain
        found.untracked_terms = []


def _undecided_problem(failure: Failed, where: str, s: Settings) -> Problem:
    """Nothing was seen: no direction's central differences could decide, and the inputs
    are too large for gradcheck's Jacobians. Never a pass."""
    why = (
        "A kink was crossed: the Function is not differentiable along these directions at "
        "these inputs (a ReLU, abs or max whose input is exactly at its kink, a sort with "
        "ties). " if "kink crossed" in failure.text else ""
    )  # fmt: skip
    if "steps disagree" in failure.text:
        why += (
            "The central differences disagree at every step: rounding swamps them (a part "
            "computed in a lower precision than the check, e.g. a cast to float32) or the "
            "function is not smooth there. "
        )  # fmt: skip
    if "non-finite" in failure.text:
        why += "The Function returns NaN or inf next to these inputs. "
    precision = "" if s.dtype == torch.float64 else "check in float64 (dtype=torch.float64), "
    return Problem("undecided", (
        f"could not decide at these inputs: {failure.text} {why}Nothing was verified, so "
        f"this is not a pass. Try other inputs (away from kinks and ties), {precision}or a "
        f"smaller size (up to {evidence.FULL_MODE_UP_TO} elements, where gradcheck's "
        f"Jacobians decide). Seen at {where}."
    ), "check")  # fmt: skip


def _first_order_problem(failure: Failed, where: str) -> Problem:
    seen = f"{where}: {failure}"
    if failure.kind == "nonlinear":
        return Problem("backward-not-linear", (
            "backward is not linear in its incoming gradient. Autograd adds the gradients "
            "that reach an output before it calls backward once, so the result depends on "
            "how the loss is written, and double backward differentiates a map that is no "
            f"vector-Jacobian product. Seen at {seen}"
        ), "surrogate")  # fmt: skip
    if failure.kind == "modified-incoming":
        return Problem("modifies-incoming-gradient", (
            "backward modified its incoming gradient in place (e.g. dY *= cos, "
            "dY.addcmul_(...)). Autograd hands backward the caller's own tensor, and may hand "
            "the same one to other consumers, so their gradients are silently changed; in a "
            "gradient penalty the incoming gradient requires grad and the in-place edit "
            "raises. Work on a new tensor (dY = dY * cos), or clone it first. "
            f"Seen at {seen}"
        ), "inplace")  # fmt: skip
    if failure.kind == "raised":
        return Problem("backward-raised", (
            f"the first backward raises an error, so nothing else was checked. Seen at {seen}"
        ), None)  # fmt: skip
    return Problem("first-order", (
        "backward does not compute the first derivative correctly. Fix the first derivative "
        "before the second; if it is a surrogate gradient on purpose (straight-through, "
        "gradient reversal), check with surrogate_gradient=True (--surrogate-gradient). "
        f"Seen at {seen}"
    ))  # fmt: skip


def _describe_passing(call: Call, inputs: tuple[torch.Tensor, ...],
                      weights: list[torch.Tensor], found: causes.Structure,
                      report: Report) -> None:  # fmt: skip
    report.notes += _guarded(
        report, "graph", lambda: causes.zero_second_derivative_notes(call, inputs, weights), []
    )
    report.notes += causes.notes_on_passing_structure(found)


def _compare_forward_mode(call: Call, inputs: tuple[torch.Tensor, ...],
                          weights: list[torch.Tensor], s: Settings, found: causes.Structure,
                          report: Report) -> None:  # fmt: skip
    first = _guarded(report, "forward mode",
                     lambda: evidence.jvp_agreement(call, inputs, weights, s), "skipped")
    report.results["forward mode"] = first
    if first.startswith("skipped"):
        return
    report.results["forward-mode HVP"] = _guarded(
        report, "HVP", lambda: evidence.hvp_agreement(call, inputs, weights, s), "skipped"
    )
    disagreeing = [name for name in ("forward mode", "forward-mode HVP")
                   if report.results[name] == "DISAGREE"]  # fmt: skip
    if not disagreeing:
        return
    if found.what == "builtin":
        advice = (
            "Only PyTorch's own operators are involved: an operator's forward-mode formula "
            "differs from its backward formula (torch's gradcheck with check_forward_ad=True "
            "fails too). Use reverse mode for it; it is not your code."
        )
    elif found.what == "composite":
        advice = ("The jvp staticmethod of a Function it calls does not compute the same "
                  "derivative as that Function's backward.")  # fmt: skip
    else:
        advice = "The jvp staticmethod does not compute the same derivative as backward."
    report.problems.append(Problem("forward-mode-mismatch", (
        f"forward mode and reverse mode disagree ({', '.join(disagreeing)}). {advice}"
    ), "modern"))  # fmt: skip


def _check_third_order(call: Call, inputs: tuple[torch.Tensor, ...],
                       weights: list[torch.Tensor], s: Settings,
                       report: Report) -> None:  # fmt: skip
    try:
        report.results["third order"] = evidence.third_order(call, inputs, weights, s)
    except Failed as failure:
        report.results["third order"] = "FAILED"
        report.problems.append(Problem("third-order", (
            "the third derivative is wrong or missing: the backward of backward is not "
            f"itself differentiable. Seen: {failure}"
        )))  # fmt: skip
