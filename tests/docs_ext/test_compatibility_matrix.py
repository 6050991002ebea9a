"""The compatibility matrix: its claims, checked by running torch here, not by reading the page.

CLAIMS is what the page says, written down from what each style is known to support (old-style
Functions are refused by torch.func; the setup_context Functions have jvp and vmap rules;
custom operators have reverse-mode autograd and a vmap rule but no forward-mode rule; AOTAutograd
compiles first-order backward only, and Dynamo runs NumPy and jvp staticmethods eagerly at a
graph break). Every "pass" claim is checked against the native op with plain torch calls below;
every failure claim is checked to raise the error, or give the wrong result, that it shows.
"""

from __future__ import annotations

import compatibility_matrix as matrix
import error_index
import pytest
import torch
from torch.autograd import gradgradcheck
from torch.autograd.gradcheck import GradcheckError
from torch.func import hessian, jacfwd, jacrev, jvp, vmap

from double_backward import Cube, CubeBackward, Exp, SinhBad, Square, sinh
from double_backward.functions import cpp_extension
from double_backward.functions import setup_context_style as modern
from double_backward.functions.custom_ops import cube, cube_backward
from double_backward.functions.higher_orders import Cos, Sin

PASS, WRONG = "pass", "wrong"
OLD_STYLE = "Old style under torch.func"
COMPILE = "Double backward through torch.compile"
CPP_FUNC = "C++ Function under torch.func"
NO_GRAPH = "The gradient has no graph"
TORCH_FUNC = ["vmap", "jacrev", "jacfwd", "hessian", "jvp"]
FIRST_SEVEN = [
    "first backward", "double backward", "double backward, composed loss",
    "double backward, after relu", "double backward, beside x**2", "gradgradcheck",
    "third order",
]  # fmt: skip


def _row(
    first_seven=PASS, torch_func=OLD_STYLE, compile_first=PASS, compile_double=COMPILE
):
    values = [first_seven] * 7 if isinstance(first_seven, str) else first_seven
    funcs = [torch_func] * 5 if isinstance(torch_func, str) else torch_func
    return dict(
        zip([*FIRST_SEVEN, *TORCH_FUNC], [*values, *funcs], strict=True),
        **{
            "compile, first order": compile_first,
            "compile, double backward": compile_double,
        },
    )


MODERN = _row(torch_func=PASS, compile_double=PASS)

# (row key as the page shows it) -> (function, native, claims)
CLAIMS = {
    "Square (tutorial)": (Square.apply, lambda t: t**2, _row()),
    "Exp (tutorial)": (Exp.apply, torch.exp, _row()),
    "sinh (Sinh) (tutorial)": (sinh, torch.sinh, _row()),
    "SinhBad (tutorial, broken)": (
        SinhBad.apply,
        torch.sinh,
        # Raises only for Σ f(x); in a composed loss, after a ReLU (exactly zero, tested
        # below) or beside x², silently wrong.
        _row([PASS, NO_GRAPH, WRONG, WRONG, WRONG, "gradgradcheck finds a mismatch", WRONG]),
    ),
    # NumPy in backward: Dynamo runs it eagerly at a graph break, so double backward works.
    "Cube (tutorial)": (Cube.apply, lambda t: t**3, _row(compile_double=PASS)),
    "CubeBackward(x, x) (tutorial)": (
        lambda t: CubeBackward.apply(t, t),
        lambda t: 3 * t**3,
        _row(compile_double=PASS),
    ),
    # A jvp staticmethod: Dynamo runs the Function eagerly at a graph break.
    "Square (setup_context)": (modern.Square.apply, lambda t: t**2, MODERN),
    "Exp (setup_context)": (modern.Exp.apply, torch.exp, MODERN),
    "Cube (setup_context)": (modern.Cube.apply, lambda t: t**3, MODERN),
    "CubeBackward(x, x) (setup_context)": (
        lambda t: modern.CubeBackward.apply(t, t),
        lambda t: 3 * t**3,
        MODERN,
    ),
    "cube (custom op)": (
        cube,
        lambda t: t**3,
        _row(torch_func=[PASS, OLD_STYLE, WRONG, OLD_STYLE, WRONG]),
    ),
    "cube_backward(x, x) (custom op)": (
        lambda t: cube_backward(t, t),
        lambda t: 3 * t**3,
        _row(torch_func=[PASS, OLD_STYLE, WRONG, OLD_STYLE, WRONG]),
    ),
    # C++ torch::autograd::Functions: Dynamo runs them eagerly; functorch refuses them.
    "cube (C++)": (
        cpp_extension.cube, lambda t: t**3, _row(torch_func=CPP_FUNC, compile_double=PASS)
    ),
    "cube_untracked (C++, first order only)": (
        cpp_extension.cube_untracked,
        lambda t: t**3,
        _row(
            # Beside x², its share of the second derivative is silently missing.
            [PASS, NO_GRAPH, NO_GRAPH, NO_GRAPH, WRONG,
             "gradgradcheck finds no second derivative", WRONG],
            torch_func=CPP_FUNC,
            compile_double=NO_GRAPH,
        ),
    ),
    "Sin (tutorial)": (Sin.apply, torch.sin, _row()),
    "Cos (tutorial)": (Cos.apply, torch.cos, _row()),
}  # fmt: skip

# Dynamo instantiates old-style Functions while tracing them, which torch itself deprecates.
TORCH_INTERNAL_WARNINGS = pytest.mark.filterwarnings(
    "ignore:<class 'torch.autograd.function.Function'> should not be instantiated",
    # Dynamo announces the graph break at a call into the C++ extension; the matrix shows it.
    f"ignore:{matrix.DYNAMO_PYBIND_WARNING}",
)
X = (-1.5, 0.5, 2.0)


def _x(requires_grad=False):
    return torch.tensor(X, dtype=torch.float64, requires_grad=requires_grad)


def _nth(fn, x, order):
    value = fn(x)
    for step in range(order):
        (value,) = torch.autograd.grad(value.sum(), x, create_graph=step < order - 1)
    return value


def _third(fn):
    # Third derivative as plot_08 takes it: a derivative with no graph is constant.
    x = _x(True)
    value = fn(x)
    for _ in range(3):
        if not value.requires_grad:
            value = torch.zeros_like(x)
            continue
        (value,) = torch.autograd.grad(value.sum(), x, create_graph=True)
    return value


def _second_of(loss):
    # d/dx of Σ ∂loss/∂x, the loss written out here rather than taken from the matrix.
    def run(fn):
        x = _x(True)
        (grad_x,) = torch.autograd.grad(loss(fn, x), x, create_graph=True)
        return torch.autograd.grad(grad_x.sum(), x)[0]

    return run


INDEPENDENT = {
    "first backward": lambda fn: _nth(fn, _x(True), 1),
    "double backward": lambda fn: _nth(fn, _x(True), 2),
    "double backward, composed loss": _second_of(
        lambda fn, x: 0.5 * fn(x).pow(2).sum()
    ),
    "double backward, after relu": _second_of(lambda fn, x: torch.relu(fn(x)).sum()),
    "double backward, beside x**2": _second_of(
        lambda fn, x: fn(x).sum() + x.pow(2).sum()
    ),
    "third order": _third,
    "vmap": lambda fn: vmap(fn)(torch.stack([_x(), 2 * _x()])),
    "jacrev": lambda fn: jacrev(fn)(_x()),
    "jacfwd": lambda fn: jacfwd(fn)(_x()),
    "hessian": lambda fn: hessian(lambda t: fn(t).sum())(_x()),
    "jvp": lambda fn: jvp(fn, (_x(),), (torch.ones(3, dtype=torch.float64),))[1],
}


def _cells(kind):
    """The cells claimed to pass, to be wrong, or to raise ("error")."""
    return [
        pytest.param(key, column, id=f"{key} | {column}")
        for key, (_, _, claims) in CLAIMS.items()
        for column, claimed in claims.items()
        if column in INDEPENDENT
        and kind == (claimed if claimed in (PASS, WRONG) else "error")
    ]


def test_claims_cover_every_row_and_column_of_the_page():
    keys = {f"{row.label} ({row.style})" for row in matrix.ROWS}
    assert keys == set(CLAIMS)
    assert all(list(claims) == list(matrix.COLUMNS) for _, _, claims in CLAIMS.values())


@pytest.mark.parametrize(("key", "column"), _cells(PASS))
def test_claimed_pass_agrees_with_native(key, column):
    fn, native, _ = CLAIMS[key]
    torch.testing.assert_close(INDEPENDENT[column](fn), INDEPENDENT[column](native))


def test_sinh_bad_after_relu_is_exactly_zero():
    second = INDEPENDENT["double backward, after relu"](SinhBad.apply)
    assert (second == 0).all()
    assert INDEPENDENT["double backward, after relu"](torch.sinh).abs().max() > 1


@pytest.mark.parametrize(("key", "column"), _cells(WRONG))
def test_claimed_wrong_runs_and_disagrees_with_native(key, column):
    fn, native, _ = CLAIMS[key]
    got, expected = INDEPENDENT[column](fn), INDEPENDENT[column](native)
    assert not torch.allclose(got, expected)


@pytest.mark.parametrize(("key", "column"), _cells("error"))
def test_claimed_error_is_raised_with_the_message_indexed_under_its_title(key, column):
    fn, _, claims = CLAIMS[key]
    indexed = error_index.raised_messages()[claims[column]]
    with pytest.raises(Exception) as raised:  # noqa: B017 - the message is what is checked
        INDEPENDENT[column](fn)
    assert error_index.first_line(raised.value) == indexed


@pytest.mark.parametrize("key", list(CLAIMS))
def test_gradgradcheck_claim(key):
    fn, _, claims = CLAIMS[key]
    if claims["gradgradcheck"] == PASS:
        assert gradgradcheck(fn, (_x(True),))
    else:
        with pytest.raises(GradcheckError) as raised:
            gradgradcheck(fn, (_x(True),))
        indexed = error_index.raised_messages()[claims["gradgradcheck"]]
        assert error_index.first_line(raised.value) == indexed


@TORCH_INTERNAL_WARNINGS
@pytest.mark.parametrize("key", list(CLAIMS))
def test_compile_claims(key):
    fn, native, claims = CLAIMS[key]
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager")
    assert claims["compile, first order"] == PASS
    torch.testing.assert_close(_nth(compiled, _x(True), 1), _nth(native, _x(True), 1))
    if claims["compile, double backward"] == PASS:
        torch.testing.assert_close(
            _nth(compiled, _x(True), 2), _nth(native, _x(True), 2)
        )
    else:
        with pytest.raises(RuntimeError) as raised:
            _nth(compiled, _x(True), 2)
        indexed = error_index.raised_messages()[claims["compile, double backward"]]
        assert error_index.first_line(raised.value) == indexed


@TORCH_INTERNAL_WARNINGS
def test_generated_matrix_says_what_the_claims_say():
    cells = matrix.measure()
    assert len(cells) == len(CLAIMS) * len(matrix.COLUMNS)
    for key, (_, _, claims) in CLAIMS.items():
        for column, claimed in claims.items():
            cell = cells[matrix.cell_key(key, column)]
            shown = cell["error"] if cell["outcome"] == "error" else cell["outcome"]
            assert shown == claimed, (key, column, cell)


def test_unknown_error_message_fails_the_build():
    with pytest.raises(RuntimeError, match="not in the error index"):
        matrix.error_title("RuntimeError: a message nobody indexed")


def _all(value):
    return {
        matrix.cell_key(f"{row.label} ({row.style})", column): dict(value)
        for row in matrix.ROWS
        for column in matrix.COLUMNS
    }


PASSED = {"outcome": PASS, "detail": ""}
FAKE_TITLE = "Double backward through torch.compile"


def test_render_links_each_error_to_its_index_entry_and_states_the_torch_version():
    cells = _all(PASSED)
    message = error_index.raised_messages()[COMPILE]
    cells["Square (tutorial) | compile, double backward"] = {
        "outcome": "error", "detail": message, "error": COMPILE
    }  # fmt: skip
    cells["cube (custom op) | jvp"] = {"outcome": WRONG, "detail": "off by 12"}
    page = matrix.render({"9.9.9": matrix.Measurement("9.9.9", "", cells, live=True)})
    table_lines = [line for line in page.splitlines() if line.startswith("|")]
    tables, current = [], []
    for line in [*page.splitlines(), ""]:
        if line.startswith("|"):
            current.append(line.replace("\\|", "").count("|"))
        elif current:
            tables.append(current)
            current = []
    assert len(tables) == len(matrix.TABLES)
    assert all(len(set(cells)) == 1 for cells in tables), (
        "every row of a table has as many cells as its header"
    )
    assert len(table_lines) == len(matrix.TABLES) * (len(matrix.ROWS) + 2)
    assert "torch 9.9.9" in page
    assert "(run when this page was built)" in page
    assert "{ref}`E1 <matrix-error-1>`" in page
    assert "(project:errors.md#double-backward-through-torchcompile)" in page
    assert "**wrong**, off by 12" in page
    assert page.count("| pass |") >= 1
    assert "One torch release measured" in page


def test_render_shows_each_release_and_the_cells_that_changed_between_them():
    message = error_index.raised_messages()[COMPILE]
    old = _all(PASSED)
    old["Square (tutorial) | compile, double backward"] = {
        "outcome": "error", "detail": message, "error": COMPILE
    }  # fmt: skip
    new = _all(PASSED)
    new["Square (tutorial) | compile, double backward"] = {
        "outcome": "error", "detail": "RuntimeError: reworded", "error": COMPILE
    }  # fmt: skip
    new["Exp (tutorial) | jvp"] = {"outcome": WRONG, "detail": "off by 1"}
    del new["Cos (tutorial) | vmap"]  # a row measured on one release only
    page = matrix.render({
        "2.13.0": matrix.Measurement("2.13.0", "at build time", old, live=True),
        "2.14.1": matrix.Measurement("2.14.1", "2026-12-03 18:40 UTC", new),
    })  # fmt: skip
    assert "## torch 2.13.0" in page and "## torch 2.14.1" in page
    assert "measured 2026-12-03 18:40 UTC by `nox -s matrix -- 2.14.1`" in page
    table_lines = [line for line in page.splitlines() if line.startswith("|")]
    assert len(table_lines) == 2 * len(matrix.TABLES) * (len(matrix.ROWS) + 2)
    # One changed cell: the reworded message is the same index entry, so not a change.
    changes = [line for line in page.splitlines() if line.startswith("- `")]
    assert changes == [
        "- `Exp (tutorial)`, jvp: torch 2.13.0: pass; torch 2.14.1: **wrong**, off by 1"
    ]
    assert page.count("*changed*") == 1 + 1  # the marked cell, and the legend's sentence
    assert "**wrong**, off by 1, *changed*" in page
    assert "1 cells were added after this measurement" in page
    assert "not measured" in page
    # The legend shows each release's wording of the one error.
    assert f"torch 2.13.0: `{message}`. torch 2.14.1: `RuntimeError: reworded`." in page
