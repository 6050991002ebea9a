"""Write the compatibility matrix: every Function the package ships, under every transform.

Each cell is run with the installed torch when the matrix is generated: the Function under a
transform (a first or second backward, the second derivative of four losses
(:data:`LOSSES`), ``gradgradcheck``, a ``torch.func`` transform, ``torch.compile``) against
the same transform of the native op. A cell is ``pass`` when the
two agree, the error's first line (linked to its entry in the error index) when it raises,
and "wrong, no error" when it runs and disagrees. A message the error index does not know
fails the build: add a scenario for it to ``error_index.py``.

The table is written to ``_generated/compatibility_matrix.md``, which ``compatibility.md``
includes, and regenerated only when torch or the package changes (the error index's rule).
To add a row, add one line to :data:`ROWS`.
"""

from __future__ import annotations

import functools
import importlib
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from error_index import (
    GRAD_MODE_TITLES,
    TORCH_INTERNAL_WARNING,
    first_line,
    raised_messages,
)
from source_digest import digest, regenerate
from sphinx.application import Sphinx
from sphinx.util import logging
from versioned_results import Measurement, by_version, changed_cells, committed_files

LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Row:
    """One Function: ``target`` is ``"module:attribute"``; ``native`` an expression in ``t``.

    ``arity=2`` calls a two-input Function as ``f(t, t)`` (so ``native`` is that composite).
    """

    label: str
    style: str
    target: str
    native: str
    arity: int = 1


# One line per Function the package ships; a C++ extension row is one more line like these.
ROWS = [
    Row("Square", "tutorial", "double_backward:Square.apply", "t**2"),
    Row("Exp", "tutorial", "double_backward:Exp.apply", "torch.exp(t)"),
    Row("sinh (Sinh)", "tutorial", "double_backward:sinh", "torch.sinh(t)"),
    Row("SinhBad", "tutorial, broken", "double_backward:SinhBad.apply",
        "torch.sinh(t)"),
    Row("Cube", "tutorial", "double_backward:Cube.apply", "t**3"),
    Row("CubeBackward(x, x)", "tutorial", "double_backward:CubeBackward.apply", "3 * t**3",
        arity=2),
    Row("Square", "setup_context",
        "double_backward.functions.setup_context_style:Square.apply", "t**2"),
    Row("Exp", "setup_context",
        "double_backward.functions.setup_context_style:Exp.apply", "torch.exp(t)"),
    Row("Cube", "setup_context",
        "double_backward.functions.setup_context_style:Cube.apply", "t**3"),
    Row("CubeBackward(x, x)", "setup_context",
        "double_backward.functions.setup_context_style:CubeBackward.apply", "3 * t**3",
        arity=2),
    Row("cube", "custom op", "double_backward.functions.custom_ops:cube", "t**3"),
    Row("cube_backward(x, x)", "custom op",
        "double_backward.functions.custom_ops:cube_backward", "3 * t**3", arity=2),
    Row("cube", "C++", "double_backward.functions.cpp_extension:cube", "t**3"),
    Row("cube_untracked", "C++, first order only",
        "double_backward.functions.cpp_extension:cube_untracked", "t**3"),
    Row("Sin", "tutorial", "double_backward.functions.higher_orders:Sin.apply",
        "torch.sin(t)"),
    Row("Cos", "tutorial", "double_backward.functions.higher_orders:Cos.apply",
        "torch.cos(t)"),
]  # fmt: skip

# Dynamo warns, then breaks the graph, at a call into a pybind11 extension (the C++ rows).
DYNAMO_PYBIND_WARNING = "Dynamo does not know how to trace the builtin"

# The compile backend: AOTAutograd (where the double-backward limit lives) without
# inductor's code generation, which takes ~20 s per first compile on 2 cores.
COMPILE_BACKEND = "aot_eager"
INPUT = (-1.5, 0.5, 2.0)  # float64; away from 0 so a dropped term shows


@functools.cache
def load(row: Row) -> Callable:
    """The row's Function as a one-argument callable."""
    module_name, attribute = row.target.split(":")
    value = importlib.import_module(module_name)
    for name in attribute.split("."):
        value = getattr(value, name)
    if row.arity == 2:
        return lambda t, fn=value: fn(t, t)
    return value


def native(row: Row) -> Callable:
    import torch

    return eval(f"lambda t: {row.native}", {"torch": torch})  # noqa: S307 - our own table


# -- the columns: each takes a one-argument function, returns a tensor to compare -----------
def _leaf():
    import torch

    return torch.tensor(INPUT, dtype=torch.float64, requires_grad=True)


def _plain():
    return _leaf().detach()


def _derivative(fn: Callable, order: int, create_graph_last: bool = False):
    import torch

    x = _leaf()
    value = fn(x)
    for step in range(order):
        create_graph = step < order - 1 or create_graph_last
        (value,) = torch.autograd.grad(value.sum(), x, create_graph=create_graph)
    return value


# The loss a second derivative is taken of decides what a broken Function does: with
# ``f(x).sum()`` the incoming gradient is plain ones, the special case where most broken
# Functions raise. In a composed loss (``½ Σ f(x)²``, f after a smooth nonlinear op) the
# incoming gradient depends on x; after a ReLU (``Σ relu(f(x))``) it is a 0/1 step whose own
# derivative is zero; beside another term (``Σ f(x) + Σ x²``) the gradient reaches x through
# that term even when f's share has no path. These are the cases a training loss meets.
LOSSES: dict[str, Callable] = {
    "composed loss": lambda fn, x: (fn(x) ** 2).sum() / 2,
    "after relu": lambda fn, x: fn(x).relu().sum(),
    "beside x**2": lambda fn, x: fn(x).sum() + (x**2).sum(),
}


def _second_derivative_of(loss: str) -> Callable:
    def run(fn: Callable):
        import torch

        x = _leaf()
        (grad_x,) = torch.autograd.grad(LOSSES[loss](fn, x), x, create_graph=True)
        (second,) = torch.autograd.grad(grad_x.sum(), x)
        return second

    return run


def _third_order(fn: Callable):
    # Taken as plot_08 takes them: a derivative with no graph back to x is constant, so
    # the next one is zero (x**2 has no third-order graph, and needs none).
    from double_backward.functions.higher_orders import derivatives

    return derivatives(fn, _plain(), 3)[3]


def _gradgradcheck(fn: Callable):
    import torch
    from torch.autograd import gradgradcheck

    return torch.tensor(gradgradcheck(fn, (_leaf(),)))


@functools.cache
def _compiled(fn: Callable):
    """``fn`` compiled once for both compile columns, and the graph breaks it took."""
    import torch
    from torch._dynamo.utils import counters

    torch._dynamo.reset()  # each row compiles afresh: no cache or recompile limit shared
    counters.clear()
    compiled = torch.compile(fn, backend=COMPILE_BACKEND)
    compiled(_leaf())  # compile now, to count the graph breaks
    return compiled, sum(counters["graph_break"].values())


def _compile_first_order(fn: Callable):
    return _derivative(_compiled(fn)[0], 1)


def _compile_double_backward(fn: Callable):
    return _derivative(_compiled(fn)[0], 2)


def _torch_func(name: str) -> Callable:
    def run(fn: Callable):
        import torch
        from torch import func

        x = _plain()
        if name == "vmap":
            return func.vmap(fn)(torch.stack([x, 2 * x]))
        if name == "jacrev":
            return func.jacrev(fn)(x)
        if name == "jacfwd":
            return func.jacfwd(fn)(x)
        if name == "hessian":
            return func.hessian(lambda t: fn(t).sum())(x)
        return func.jvp(fn, (x,), (torch.ones_like(x),))[1]

    return run


COLUMNS: dict[str, Callable] = {
    "first backward": lambda fn: _derivative(fn, 1),
    "double backward": lambda fn: _derivative(fn, 2),
    "double backward, composed loss": _second_derivative_of("composed loss"),
    "double backward, after relu": _second_derivative_of("after relu"),
    "double backward, beside x**2": _second_derivative_of("beside x**2"),
    "gradgradcheck": _gradgradcheck,
    "third order": _third_order,
    "vmap": _torch_func("vmap"),
    "jacrev": _torch_func("jacrev"),
    "jacfwd": _torch_func("jacfwd"),
    "hessian": _torch_func("hessian"),
    "jvp": _torch_func("jvp"),
    "compile, first order": _compile_first_order,
    "compile, double backward": _compile_double_backward,
}


# Compiled results are compared with the eager native result: compiling the native op too
# would double the compile time and test torch.compile rather than our Functions.
REFERENCE = {
    "compile, first order": "first backward",
    "compile, double backward": "double backward",
}


@dataclass(frozen=True)
class Cell:
    """``outcome`` is "pass", "error" or "wrong"; ``detail`` the message or the mismatch."""

    outcome: str
    detail: str = ""


def run_cell(column: str, row: Row) -> Cell:
    """Run one cell: the row's Function and its native twin under the column's transform."""
    import torch

    transform = COLUMNS[column]
    with warnings.catch_warnings():
        # torch's own forward-AD set-up uses torch.jit.script, deprecated (a DeprecationWarning
        # in torch 2.13, a FutureWarning in 2.14; pyproject's filterwarnings says so).
        warnings.filterwarnings(
            "ignore",
            "`torch.jit.script` is deprecated",
            module=r"torch\.jit\._script\Z",
        )
        warnings.filterwarnings("ignore", TORCH_INTERNAL_WARNING)
        # Dynamo's note that it cannot trace into a C++ extension: the graph break it
        # announces is counted and shown in the cell instead.
        warnings.filterwarnings("ignore", DYNAMO_PYBIND_WARNING)
        expected = COLUMNS[REFERENCE.get(column, column)](native(row))
        try:
            got = transform(load(row))
        except Exception as error:  # noqa: BLE001 - every error is a result here
            return Cell("error", first_line(error))
    if got.shape == expected.shape and torch.allclose(got, expected, equal_nan=True):
        if column.startswith("compile") and _compiled(load(row))[1]:
            return Cell("pass", "graph break, ran eagerly")
        return Cell("pass")
    difference = (got - expected).abs().max().item()
    return Cell("wrong", f"off by {difference:.3g}")


def run_matrix() -> dict[tuple[str, str], Cell]:
    """Every cell, keyed by (row label and style, column)."""
    return {
        (f"{row.label} ({row.style})", column): run_cell(column, row)
        for row in ROWS
        for column in COLUMNS
    }


# -- rendering ----------------------------------------------------------------------------
_OP_NAME = re.compile(r"double_backward[.:]+\w+(\.default)?")


def _normalised(message: str) -> str:
    return _OP_NAME.sub("<op>", message)


def error_title(message: str) -> str:
    """The error-index entry whose message this is; a build error when there is none.
    Scenarios the installed torch no longer raises (cdist's, in 2.14.1) match nothing."""
    for title, indexed in raised_messages().items():
        # The matrix runs with grad mode on: its "does not require grad" is a Function's.
        if title in GRAD_MODE_TITLES:
            continue
        if _normalised(indexed) == _normalised(message):
            return title
    raise RuntimeError(
        f"compatibility_matrix: {message!r} is not in the error index; add a scenario "
        "raising it to docs/_ext/error_index.py"
    )


def _slug(title: str) -> str:
    from myst_parser.slugs import github_slugify

    return github_slugify(title)


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'")


# Short column headers, so that the table fits a page.
HEADERS = {
    "first backward": "1st backward of Σ f(x)",
    "double backward": "2nd backward of Σ f(x)",
    "double backward, composed loss": "2nd backward of ½ Σ f(x)²",
    "double backward, after relu": "2nd backward of Σ relu(f(x))",
    "double backward, beside x**2": "2nd backward of Σ f(x) + Σ x²",
    "gradgradcheck": "grad&shy;grad&shy;check",
    "third order": "3rd order",
    "compile, first order": "compile, 1st",
    "compile, double backward": "compile, 2nd of Σ f(x)",
}


# The page shows three tables, so that each fits the page's width.
TABLES = {
    "Second derivative, by the loss it is taken of": [
        "first backward", "double backward", "double backward, composed loss",
        "double backward, after relu", "double backward, beside x**2", "gradgradcheck",
    ],
    "Third order and torch.compile": [
        "third order", "compile, first order", "compile, double backward",
    ],
    "torch.func": ["vmap", "jacrev", "jacfwd", "hessian", "jvp"],
}  # fmt: skip


def cell_key(key: str, column: str) -> str:
    """A cell's key in the measured results: ``"Square (tutorial) | jacfwd"``."""
    return f"{key} | {column}"


@functools.cache
def measure() -> dict[str, dict[str, str]]:
    """Every cell with the installed torch, as JSON, each error with its index title:
    what the build shows and what ``nox -s matrix`` commits for other torch releases.
    Run once per process."""
    results = {}
    for (key, column), cell in run_matrix().items():
        value = {"outcome": cell.outcome, "detail": cell.detail}
        if cell.outcome == "error":
            value["error"] = error_title(cell.detail)
        results[cell_key(key, column)] = value
    return results


def _anchor(torch_version: str) -> str:
    return "matrix-torch-" + torch_version.replace(".", "-")


def render(measurements: dict[str, Measurement]) -> str:
    """One pair of tables per torch release (oldest first), what changed between them, and
    the legend of the errors they show, each error's message as each release printed it."""
    assert sorted(sum(TABLES.values(), [])) == sorted(COLUMNS), (
        "TABLES must show COLUMNS"
    )
    # E1, E2...: one number per error-index entry, in order of first appearance.
    titles: list[str] = []
    messages: dict[str, dict[str, str]] = {}  # title -> release -> message

    def shown(value: dict[str, str] | None) -> str:
        if value is None:
            return "not measured"
        if value["outcome"] == "pass":
            return "pass, eager" if value["detail"] else "pass"
        if value["outcome"] == "wrong":
            return f"**wrong**, {value['detail']}"
        if value["error"] not in titles:
            titles.append(value["error"])
        number = titles.index(value["error"]) + 1
        return f"{{ref}}`E{number} <matrix-error-{number}>`"

    keys = [f"{row.label} ({row.style})" for row in ROWS]
    changed = changed_cells(measurements, shown=_outcome_and_title)
    tables: list[str] = []
    # cell -> its value in the previous release that measured it
    last_seen: dict[str, dict[str, str]] = {}
    for torch_version, measurement in measurements.items():
        results = measurement.results
        tables += ["", f"({_anchor(torch_version)})=", f"## torch {torch_version}"]
        missing = [
            cell_key(key, column)
            for key in keys
            for column in COLUMNS
            if cell_key(key, column) not in results
        ]
        if missing:
            tables += [
                "",
                f"{len(missing)} cells were added after this measurement and show *not "
                f"measured*: `nox -s matrix -- {torch_version}` measures them.",
            ]
        for heading, columns in TABLES.items():
            headers = [HEADERS.get(column, column) for column in columns]
            tables += [
                "",
                f"### torch {torch_version}: {heading}",
                "",
                "| Function | " + " | ".join(headers) + " |",
                "|---" * (len(columns) + 1) + "|",
            ]
            for row, key in zip(ROWS, keys, strict=True):
                rendered = []
                for column in columns:
                    cell = cell_key(key, column)
                    text = shown(results.get(cell))
                    if (
                        cell in results
                        and cell in last_seen
                        and (
                            _outcome_and_title(results[cell])
                            != _outcome_and_title(last_seen[cell])
                        )
                    ):
                        text += ", *changed*"
                    rendered.append(text)
                tables.append(
                    f"| `{row.label}` ({row.style}) | " + " | ".join(rendered) + " |"
                )
        for cell, value in results.items():
            last_seen[cell] = value
            if value["outcome"] == "error":
                messages.setdefault(value["error"], {})[torch_version] = value["detail"]

    described = []
    for torch_version, measurement in measurements.items():
        where = (
            "run when this page was built"
            if measurement.live
            else f"measured {measurement.measured} by `nox -s matrix -- {torch_version}`"
        )
        described.append(
            f"{{ref}}`torch {torch_version} <{_anchor(torch_version)}>` ({where})"
        )
    lines = [
        "Tested on " + " and ".join(described) + "; `torch.compile` with the "
        f"`{COMPILE_BACKEND}` backend.",
        "",
        "## What changed between torch releases",
        "",
    ]
    if changed:
        lines += ["These cells differ (marked *changed* in the later tables):", ""]
        for cell, values in changed.items():
            key, column = cell.split(" | ")
            lines.append(
                f"- `{key}`, {column}: "
                + "; ".join(
                    f"torch {tv}: {shown(value)}" for tv, value in values.items()
                )
            )
    elif len(measurements) == 1:
        lines.append("One torch release measured: nothing to compare.")
    else:
        lines.append(
            "No cell differs between torch " + " and ".join(measurements) + "."
        )
    lines += tables
    lines += ["", "## The errors in the tables", ""]
    for number, title in enumerate(titles, start=1):
        by_release = messages[title]
        if len(set(by_release.values())) == 1:
            printed = f"`{_escape(next(iter(by_release.values())))}`."
        else:
            printed = " ".join(
                f"torch {tv}: `{_escape(message)}`."
                for tv, message in by_release.items()
            )
        lines += [
            f"(matrix-error-{number})=",
            f"**E{number}**: {printed} Error index: "
            f"[{title}](project:errors.md#{_slug(title)}).",
            "",
        ]
    return "\n".join(lines)


def _outcome_and_title(value: dict[str, str]) -> tuple[str, str]:
    """What a cell shows: the outcome and the error's index entry, not the error's wording
    (a reworded message is shown in the error index)."""
    return value["outcome"], value.get("error", value["detail"])


def _write_matrix(app: Sphinx) -> None:
    # Running the cells compiles 14 functions (seconds): redo it only when torch, the code or
    # a committed measurement changed (this file and error_index.py included).
    path = Path(app.srcdir) / "_generated" / "compatibility_matrix.md"
    extension_dir = Path(__file__).parent
    key = digest(
        Path(__file__),
        extension_dir / "error_index.py",
        extension_dir / "versioned_results.py",
        *committed_files("compatibility_matrix"),
        salt=version("torch"),
    )
    started = time.perf_counter()

    def make() -> str:
        return render(by_version("compatibility_matrix", measure()))

    if regenerate(path, key, make):
        LOGGER.info(
            "compatibility matrix: %d cells in %.1f s",
            len(ROWS) * len(COLUMNS),
            time.perf_counter() - started,
        )


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("builder-inited", _write_matrix)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


__all__ = [
    "COLUMNS", "LOSSES", "ROWS", "TABLES", "Cell", "Row", "measure", "render", "run_matrix",
]  # fmt: skip
