"""Check a custom Function for double-backward support, and say what is wrong in plain words.

>>> from double_backward import check, Square
>>> report = check(Square.apply, torch.randn(3, 3))
>>> report.ok
True

From the command line, on any importable Function or function::

    python -m double_backward.checker double_backward:SinhBad --shape 3,3

What it does, on float64 copies of the inputs that require grad:

1. :func:`~torch.autograd.gradcheck` and :func:`~torch.autograd.gradgradcheck`;
2. whether each first-order gradient (``create_graph=True``) has a graph back to its input;
3. whether forward saved, with ``save_for_backward``, a tensor that does not require grad
   while the inputs do: an intermediate, whose history is lost (seen by a
   :class:`~torch.autograd.graph.saved_tensors_hooks` pack hook);
4. forward-over-reverse against reverse-over-reverse Hessian-vector products;
5. optionally, third order (``gradgradcheck`` of the first derivative);
6. torch.func compatibility (``vmap``, ``jacrev``, ``hessian``), reported, never a problem.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import warnings
from collections.abc import Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError, gradcheck, gradgradcheck

from .graph_walks import reaches

DOCS_URL = "https://double-backward.readthedocs.io/en/latest/"
PAGES = {
    "intermediates": "auto_examples/plot_03_saving_intermediates.html",
    "untracked": "auto_examples/plot_04_untracked_backward.html",
    "modern": "auto_examples/plot_06_modern_api.html",
    "failures": "auto_examples/plot_08_failure_gallery.html",
}


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong with a Function's double backward, with where to read the fix."""

    name: str
    diagnosis: str
    page: str

    @property
    def url(self) -> str:
        return DOCS_URL + PAGES[self.page]

    def __str__(self) -> str:
        return f"[{self.name}] {self.diagnosis}\n    fix: {self.url}"


@dataclasses.dataclass
class Report:
    """What ``check`` found: ``problems`` (empty when all is well) and every result."""

    function: str
    results: dict[str, str] = dataclasses.field(default_factory=dict)
    problems: list[Problem] = dataclasses.field(default_factory=list)
    torch_func: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems

    def problem_names(self) -> set[str]:
        return {problem.name for problem in self.problems}

    def __str__(self) -> str:
        lines = [f"double-backward check of {self.function}:"]
        lines += [f"  {name:26} {result}" for name, result in self.results.items()]
        if self.torch_func:
            lines.append("  torch.func (reported, not required):")
            lines += [
                f"    {name:24} {result}" for name, result in self.torch_func.items()
            ]
        if self.ok:
            lines.append("No problem found: double backward works.")
        else:
            lines.append(f"{len(self.problems)} problem(s):")
            lines += [str(problem) for problem in self.problems]
        return "\n".join(lines)


def _first_line(error: BaseException) -> str:
    """The error's type and first sentence, enough to recognise it."""
    lines = str(error).strip().splitlines()
    sentence = lines[0].split(". ")[0].rstrip(",.") if lines else ""
    return f"{type(error).__name__}: {sentence}"


def _run(check: Callable[[], object]) -> str:
    try:
        check()
    except (GradcheckError, RuntimeError, NotImplementedError, TypeError) as error:
        return f"failed ({_first_line(error)})"
    return "passed"


def _first_output(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` reduced to its first output (a Function like Sinh returns several)."""

    def first(*inputs: torch.Tensor) -> torch.Tensor:
        output = fn(*inputs)
        return output[0] if isinstance(output, tuple) else output

    return first


def _scalar(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    first = _first_output(fn)
    return lambda *inputs: first(*inputs).sum()


def _saved_without_history(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> int:
    """How many tensors forward saved for backward that carry no autograd history."""
    lost = []

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if not tensor.requires_grad:
            lost.append(tensor)
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn(*inputs)
    return len(lost)


def _tensors_stashed_on_ctx(
    fn: Callable, inputs: tuple[torch.Tensor, ...]
) -> list[str]:
    """Names of tensors forward stored as plain ``ctx`` attributes (the ctx is the grad_fn)."""
    output = fn(*inputs)
    node = (output[0] if isinstance(output, tuple) else output).grad_fn
    attributes = getattr(node, "__dict__", {})
    return sorted(
        name for name, value in attributes.items() if isinstance(value, torch.Tensor)
    )


def _has_non_differentiable_outputs(
    fn: Callable, inputs: tuple[torch.Tensor, ...]
) -> bool:
    """Whether a floating-point output does not require grad although the inputs do."""
    outputs = fn(*inputs)
    outputs = outputs if isinstance(outputs, tuple) else (outputs,)
    return any(out.is_floating_point() and not out.requires_grad for out in outputs)


def _is_once_differentiable(fn: Callable) -> bool:
    """Whether ``fn`` is a Function's apply whose backward is wrapped by once_differentiable."""
    backward = getattr(getattr(fn, "__self__", None), "backward", None)
    code = getattr(backward, "__code__", None)
    return (
        hasattr(backward, "__wrapped__")
        and code is not None
        and (code.co_filename == torch.autograd.function.__file__)
    )


def _quiet_forward_mode(compute: Callable[[], object]) -> object:
    with warnings.catch_warnings():
        # torch's forward-AD set-up (first jvp call) uses the deprecated torch.jit.script.
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated")
        return compute()


def _jacobian_agreement(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> str:
    """Compare the Jacobians of forward mode (the jvp staticmethod) and reverse mode."""
    first = _first_output(fn)
    detached = tuple(x.detach() for x in inputs)
    argnums = tuple(range(len(inputs)))
    try:
        forward = _quiet_forward_mode(
            lambda: torch.func.jacfwd(first, argnums)(*detached)
        )
    except (RuntimeError, NotImplementedError) as error:
        return f"skipped (forward mode unavailable: {_first_line(error)})"
    reverse = torch.func.jacrev(first, argnums)(*detached)
    agree = all(torch.allclose(f, r) for f, r in zip(forward, reverse, strict=True))
    return "agree" if agree else "DISAGREE"


def _hvp_agreement(fn: Callable, inputs: tuple[torch.Tensor, ...]) -> str:
    """Compare forward-over-reverse with reverse-over-reverse Hessian-vector products."""
    scalar = _scalar(fn)
    vectors = tuple(torch.randn_like(x) for x in inputs)
    _, reverse = torch.autograd.functional.hvp(scalar, inputs, vectors)
    gradient = torch.func.grad(scalar, argnums=tuple(range(len(inputs))))
    detached = tuple(x.detach() for x in inputs)
    try:
        forward = _quiet_forward_mode(
            lambda: torch.func.jvp(gradient, detached, vectors)[1]
        )
    except (RuntimeError, NotImplementedError) as error:
        return f"skipped (forward mode unavailable: {_first_line(error)})"
    reverse = reverse if isinstance(reverse, tuple) else (reverse,)
    agree = all(
        torch.allclose(f, r, rtol=1e-7, atol=1e-9)
        for f, r in zip(forward, reverse, strict=True)
    )
    return "agree" if agree else "DISAGREE"


def check(
    fn: Callable[..., torch.Tensor],
    *inputs: torch.Tensor,
    third_order: bool = False,
    name: str | None = None,
) -> Report:
    """Check that ``fn`` (a Function's ``apply``, or any function of tensors) supports
    double backward at ``inputs``; return a ``Report``.

    ``report.ok`` is true when nothing is wrong; ``report.problems`` lists each problem with
    a plain-language ``diagnosis`` and the ``url`` of the page that explains the fix;
    ``report.results`` and ``report.torch_func`` hold every check's outcome, and
    ``print(report)`` shows them all.

    Inputs are copied to float64 and made to require grad. A Function returning several
    outputs (like :class:`~double_backward.Sinh`) is checked on all of them.
    """
    if not callable(fn):
        raise TypeError(
            f"check: 'fn' must be callable, e.g. MyFunction.apply, got {fn!r}"
        )
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        raise TypeError("check: pass one or more example input tensors after 'fn'")
    if not all(x.is_floating_point() for x in inputs):
        raise TypeError(
            "check: inputs must be floating-point tensors (they can require grad)"
        )
    inputs = tuple(x.detach().to(torch.float64).requires_grad_() for x in inputs)
    owner = getattr(fn, "__self__", None)  # the Function class, for SomeFunction.apply
    default_name = f"{owner.__name__}.apply" if isinstance(owner, type) else None
    report = Report(name or default_name or getattr(fn, "__qualname__", repr(fn)))

    report.results["gradcheck"] = _run(lambda: gradcheck(fn, inputs))
    if report.results["gradcheck"] != "passed":
        report.problems.append(Problem(
            "first-order", "gradcheck fails: backward does not compute the first derivative "
            "correctly. Fix the first derivative before the second.", "failures",
        ))  # fmt: skip
        return report

    report.results["gradgradcheck"] = _run(lambda: gradgradcheck(fn, inputs))
    grads = torch.autograd.grad(_scalar(fn)(*inputs), inputs, create_graph=True)
    reached = [reaches(grad, x) for grad, x in zip(grads, inputs, strict=True)]
    report.results["grad graph reaches inputs"] = "yes" if all(reached) else "no"
    lost = _saved_without_history(fn, inputs)
    report.results["saved without history"] = str(lost)

    stashed = _tensors_stashed_on_ctx(fn, inputs)
    if stashed:
        report.problems.append(Problem(
            "stashed-on-ctx", f"forward stored tensors as ctx attributes ({', '.join(stashed)}) "
            "instead of save_for_backward. Made in no-grad mode, they have no history, so "
            "the gradient built from them cannot be differentiated. Return intermediates as "
            "extra outputs and save them with save_for_backward.", "intermediates",
        ))  # fmt: skip
    elif _is_once_differentiable(fn):
        report.problems.append(Problem(
            "once-differentiable", "backward is marked @once_differentiable: the Function "
            "declares itself first-order only, and double backward raises an error by "
            "design. Remove the decorator once backward is written with differentiable "
            "operations.", "failures",
        ))  # fmt: skip
    elif lost and _has_non_differentiable_outputs(fn, inputs):
        report.problems.append(Problem(
            "non-differentiable-outputs", "forward returns extra outputs marked "
            "non-differentiable and saves them: marked so, they come back from "
            "ctx.saved_tensors without history, and the second derivative is lost. Do not "
            "mark outputs that backward differentiates through.", "intermediates",
        ))  # fmt: skip
    elif lost:
        report.problems.append(Problem(
            "saved-intermediate", f"forward saved {lost} tensor(s) with no autograd history "
            "while the inputs require grad: an intermediate result (or an output marked "
            "non-differentiable). Its gradient cannot be differentiated again. Return it as "
            "an extra output (and add its gradient in backward), or recompute it in backward "
            "from the saved inputs.", "intermediates",
        ))  # fmt: skip
    elif not all(reached):
        report.problems.append(Problem(
            "no-graph", "the first derivative has no graph back to the input: backward "
            "uses a tensor autograd does not track (stashed on ctx, detached, computed "
            "outside torch, or a backward marked @once_differentiable). Save inputs and "
            "outputs with save_for_backward, do not detach, and wrap non-torch code in a "
            "Function of its own.", "failures",
        ))  # fmt: skip
    if report.results["gradgradcheck"] != "passed" and not report.problems:
        report.problems.append(Problem(
            "wrong-second-derivative", "gradgradcheck fails although the graph reaches the "
            "input: the second derivative is silently wrong. A Function with extra outputs "
            "must add the gradients arriving at them in backward.", "intermediates",
        ))  # fmt: skip

    if not report.problems:
        report.results["Hessian-vector products"] = _hvp_agreement(fn, inputs)
        report.results["forward vs reverse Jacobian"] = _jacobian_agreement(fn, inputs)
        compared = ("Hessian-vector products", "forward vs reverse Jacobian")
        disagreeing = [name for name in compared if report.results[name] == "DISAGREE"]
        if disagreeing:
            report.problems.append(Problem(
                "forward-mode-mismatch", f"forward mode and reverse mode disagree "
                f"({', '.join(disagreeing)}): the jvp staticmethod does not compute the "
                "same derivative as backward.", "modern",
            ))  # fmt: skip
        if third_order:
            first = torch.autograd.grad
            report.results["third order"] = _run(lambda: gradgradcheck(
                lambda *xs: first(_scalar(fn)(*xs), xs, create_graph=True), inputs))  # fmt: skip
            if report.results["third order"] != "passed":
                report.problems.append(Problem(
                    "third-order", "the third derivative is wrong or missing: the backward "
                    "of backward is not itself differentiable.", "failures",
                ))  # fmt: skip

    detached = tuple(x.detach() for x in inputs)
    batched = tuple(x.detach().unsqueeze(0).expand(2, *x.shape) for x in inputs)
    report.torch_func["vmap"] = _run(lambda: torch.func.vmap(fn)(*batched))
    report.torch_func["jacrev"] = _run(lambda: torch.func.jacrev(fn)(*detached))
    report.torch_func["hessian"] = _run(
        lambda: torch.func.hessian(_scalar(fn))(*detached)
    )
    return report


def _load(target: str) -> tuple[Callable, str]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise SystemExit(
            f"expected module:Function, e.g. double_backward:Square, got {target!r}"
        )
    obj = importlib.import_module(module_name)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply, target
    if not callable(obj):
        raise SystemExit(f"{target} is neither a torch.autograd.Function nor callable")
    return obj, target


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(size) for size in text.split(",") if size.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"a shape is sizes separated by commas, got {text!r}"
        ) from error


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m double_backward.checker",
        description="Check a custom autograd Function for double-backward support.",
    )
    parser.add_argument("target", help="module:Function, e.g. double_backward:Square")
    parser.add_argument("--shape", type=_shape, action="append",
                        help="shape of one input, e.g. 3,3 (repeat for several inputs; "
                        "default: one input of shape 3)")  # fmt: skip
    parser.add_argument(
        "--third-order", action="store_true", help="also check order three"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    args = parser.parse_args(argv)
    fn, name = _load(args.target)
    torch.manual_seed(args.seed)
    inputs = [torch.randn(shape, dtype=torch.float64) for shape in args.shape or [(3,)]]
    report = check(fn, *inputs, third_order=args.third_order, name=name)
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
