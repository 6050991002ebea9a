"""editable_listings: a listed Function becomes code, and the cells after it use that code.

The pages these model: plot_03 (``Sinh`` and the wrapper ``sinh`` listed, then imported from
the package), plot_06 (two listings named ``Square``, one imported under another name, the other
reached as ``modern.Square``), plot_13 (a wrapper of a listed class imported, not listed).
Each page's cells are run in one namespace, as a notebook runs them, with the listing edited:
the edit must change what the later cells compute.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from editable_listings import PageListings, module_name

import double_backward
from double_backward.functions import cpp_extension

FUNCTIONS = Path(double_backward.__file__).parent / "functions"


def _listing_text(module: str, name: str) -> str:
    from editable_listings import definition_source

    return definition_source(module, name)


def _define(page: PageListings, file: str, name: str) -> list[str]:
    path = FUNCTIONS / file
    cell = page.define(path, {"pyobject": name}, _listing_text(module_name(path), name))
    assert cell is not None
    return cell


def _run(cells: list[str]) -> dict:
    namespace: dict = {}
    for cell in cells:
        exec(compile(cell, "<cell>", "exec"), namespace)
    return namespace


def test_module_names_come_from_the_packages_a_file_is_in():
    assert module_name(FUNCTIONS / "saving_inputs.py") == (
        "double_backward.functions.saving_inputs"
    )
    assert module_name(FUNCTIONS / "csrc" / "cube.cpp") is None


def test_a_listing_cell_runs_alone_with_the_imports_it_needs():
    page = PageListings(warn=pytest.fail)
    (cell,) = _define(page, "saving_intermediates.py", "Sinh")
    # check_real_tensor and the module's helpers, Any: everything the class uses.
    assert "from double_backward.functions._validation import check_real_tensor" in cell
    assert "from typing import Any" in cell
    namespace = _run([cell])
    x = torch.tensor(0.5, dtype=torch.float64)
    torch.testing.assert_close(namespace["Sinh"].apply(x)[0], torch.sinh(x))


def test_editing_a_listing_changes_what_the_cells_after_it_print():
    page = PageListings(warn=pytest.fail)
    sinh_class = _define(page, "saving_intermediates.py", "Sinh")
    sinh_function = _define(page, "saving_intermediates.py", "sinh")
    code = page.rewrite(
        "import torch\n\nfrom double_backward import sinh\n\n"
        "x = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)\n"
        "(grad_x,) = torch.autograd.grad(sinh(x), x, create_graph=True)\n"
        "second_order_has_graph = grad_x.requires_grad\n"
    )
    assert "from double_backward import sinh" not in code
    assert _run([sinh_class[0], sinh_function[0], code])["second_order_has_graph"]
    # A reader's edit: keep the intermediates on ctx instead of returning them (SinhBad's
    # mistake). The second derivative then has no graph: the later cell sees the edit.
    edited = sinh_class[0].replace(
        "ctx.save_for_backward(half_exp_x, half_exp_neg_x)",
        "ctx.save_for_backward(half_exp_x.detach(), half_exp_neg_x.detach())",
    )
    assert edited != sinh_class[0]
    assert not _run([edited, sinh_function[0], code])["second_order_has_graph"]


def test_a_hidden_listing_keeps_its_alias_and_module_attributes_use_the_later_one():
    page = PageListings(warn=pytest.fail)
    old = _define(page, "saving_inputs.py", "Square")
    modern = _define(page, "setup_context_style.py", "Square")
    code = page.rewrite(
        "from double_backward import Square as OldSquare\n"
        "from double_backward.functions import setup_context_style as modern\n"
        "old_square, modern_square = OldSquare, modern.Square\n"
    )
    assert (
        "OldSquare = Square" in old[0]
    )  # named where it is defined, before it is hidden
    assert "modern.Square" not in code
    namespace = _run([old[0], modern[0], code])
    assert namespace["old_square"] is not namespace["modern_square"]
    assert hasattr(namespace["modern_square"], "setup_context")
    assert namespace["old_square"].__module__ == namespace["modern_square"].__module__


def test_a_package_wrapper_of_a_listed_class_is_defined_so_that_it_calls_the_edited_one():
    page = PageListings(warn=pytest.fail)
    listing = _define(page, "failures.py", "SinhDropsExtraGrads")
    code = page.rewrite(
        "from double_backward.functions.failures import sinh_drops_extra_grads\n"
    )
    assert "def sinh_drops_extra_grads" in code
    namespace = _run([listing[0], code])
    assert namespace["sinh_drops_extra_grads"].__globals__ is namespace


def test_importing_a_hidden_listing_under_its_own_name_is_reported():
    found = []
    page = PageListings(warn=found.append)
    _define(page, "saving_inputs.py", "Square")
    _define(page, "setup_context_style.py", "Square")
    code = page.rewrite("from double_backward import Square\n")
    assert code == "from double_backward import Square"
    assert len(found) == 1 and "hidden" in found[0]


def test_cells_without_listed_names_are_left_as_written():
    page = PageListings(warn=pytest.fail)
    _define(page, "saving_inputs.py", "Square")
    code = "from double_backward import (\n    Cube,\n    Exp,\n)\nimport double_backward\n"
    assert page.rewrite(code) == code.rstrip("\n")


def test_a_selection_of_lines_stays_a_listing():
    page = PageListings(warn=pytest.fail)
    options = {"pyobject": "Square", "lines": "1-3"}
    assert page.define(FUNCTIONS / "saving_inputs.py", options, "x = 1\n") is None


def test_a_listed_method_defines_its_whole_class_and_an_edit_of_it_changes_what_runs():
    # plot_20 shows Sinh.forward, then times the package's sinh wrapper.
    page = PageListings(warn=pytest.fail)
    path = FUNCTIONS / "saving_intermediates.py"
    # The wrapper is imported before the listing, as on plot_20.
    earlier = page.rewrite("from double_backward import sinh\n")
    (cell,) = page.define(path, {"pyobject": "Sinh.forward"}, "def forward(): ...\n")
    assert "class Sinh(" in cell and "(the page shows `Sinh.forward`)" in cell
    assert "def sinh(" in cell  # defined again, after the class it calls
    code = "import torch\n\ny = sinh(torch.tensor([0.5], dtype=torch.float64))\n"
    x = torch.tensor([0.5], dtype=torch.float64)
    torch.testing.assert_close(_run([earlier, cell, code])["y"], torch.sinh(x))
    # A reader's edit of the forward the page shows: eˣ/2 + e⁻ˣ/2, cosh instead of sinh.
    edited = cell.replace(
        "return half_exp_x - half_exp_neg_x, half_exp_x, half_exp_neg_x",
        "return half_exp_x + half_exp_neg_x, half_exp_x, half_exp_neg_x",
    )
    assert edited != cell
    torch.testing.assert_close(
        _run([earlier, edited, code])["y"], torch.cosh(x)
    )


def test_a_custom_operator_stays_a_listing():
    # Defined again in a notebook that imported the package, it would be registered twice.
    page = PageListings(warn=pytest.fail)
    text = (
        '@torch.library.custom_op("double_backward::cube", mutates_args=())\n'
        "def cube(x: torch.Tensor) -> torch.Tensor:\n    return x**3\n"
    )
    assert page.define(FUNCTIONS / "custom_ops.py", {"pyobject": "cube"}, text) is None


# -- the pages that teach custom operators and C++: their downloads' code, run as a script ----
REPO = Path(__file__).parents[2]


def _download_code(example: str) -> list[str]:
    """The code cells of ``example``'s downloads, in order, as complete_downloads writes them.

    The page's text blocks give the listing cells (read by Sphinx's LiteralIncludeReader, as
    in the build), its code blocks are rewritten by the same ``PageListings``.
    """
    from complete_downloads import split_listings
    from sphinx_gallery import py_source_parser

    env = SimpleNamespace(
        relfn2path=lambda name, docname: (name, str(REPO / "docs" / name.lstrip("/"))),
        config=SimpleNamespace(source_encoding="utf-8"),
    )
    app = SimpleNamespace(env=env)
    page = PageListings(warn=pytest.fail)
    _, blocks = py_source_parser.split_code_and_text_blocks(
        str(REPO / "examples" / example)
    )
    cells: list[list[str] | str] = []
    for label, content, _ in blocks:
        if label == "text":
            cells += [p for kind, p in split_listings(app, "x", content, page) if kind == "listing"]
        else:
            cells.append(page.rewrite(content))
    page.finish()
    return [cell[0] if isinstance(cell, list) else cell for cell in cells]


def _run_script(cells: list[str], tmp_path: Path, env: dict | None = None) -> str:
    script = tmp_path / "download.py"
    script.write_text("\n\n".join(cells) + "\n")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, **(env or {})}, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


def _printed(output: str, label: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith(label)]
    return line


def test_the_custom_operators_page_defines_its_operators_and_never_imports_the_packages():
    cells = _download_code("beyond_python/plot_17_custom_ops.py")
    defining = [c for c in cells if "@torch.library.custom_op" in c]
    # cube, cube_backward, and the broken pair of the failure section, each in a code cell.
    assert len(defining) == 3
    assert "def cube(" in defining[0] and "def cube_backward(" in defining[1]
    assert "def cube_with_untracked_backward(" in defining[2]
    assert "@cube.register_vmap" in defining[0]  # the page's vmap claim holds in the download
    code = "\n".join(cells)
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }  # fmt: skip
    assert "double_backward.functions.custom_ops" not in imported
    assert "double_backward.functions.failures" not in imported
    # Registered beside the package's operators, never replacing them.
    strings = [n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant)]
    names = {v for v in strings if isinstance(v, str) and "::" in v[1:]}
    assert names == {
        "my_ops::cube_backward_without_autograd", "my_ops::cube_with_untracked_backward"
    }  # fmt: skip
    assert 'NAMESPACE = "my_ops"' in defining[0]


def test_editing_the_custom_operators_cell_changes_what_the_next_cell_prints(tmp_path):
    cells = _download_code("beyond_python/plot_17_custom_ops.py")
    first_code = next(i for i, c in enumerate(cells) if "d2y/dx2" in c)
    # Up to the derivatives' cell; and which package modules the whole download's imports load.
    imports = "\n".join(
        ast.unparse(node) for cell in cells for node in ast.parse(cell).body
        if isinstance(node, ast.Import | ast.ImportFrom)
    )  # fmt: skip
    probe = f"{imports}\nimport sys\nprint('custom_ops imported:', " \
            "'double_backward.functions.custom_ops' in sys.modules)"  # fmt: skip
    output = _run_script([*cells[: first_code + 1], probe], tmp_path)
    assert _printed(output, "custom_ops imported:") == "custom_ops imported: False"
    assert "d2y/dx2   at x = 1.5: 9.0000" in output  # 6x, as analytic
    # A reader's edit: the second derivative of cube_backward in x, 6x·grad_out, made 5x·grad_out.
    edited = cells[1].replace("grad_g * grad_out * 6 * x", "grad_g * grad_out * 5 * x")
    assert edited != cells[1]
    output = _run_script([cells[0], edited, *cells[2 : first_code + 1]], tmp_path)
    assert _printed(output, "d2y/dx2").startswith(f"d2y/dx2   at x = 1.5: {5 * 1.5:.4f}")


def test_editing_the_cpp_source_cell_changes_what_the_cells_after_it_print(tmp_path):
    # Compiles the edited source (about a minute), into an empty cache.
    cells = _download_code("beyond_python/plot_18_cpp_extension.py")
    (source_cell,) = [c for c in cells if 'CUBE_CPP = r"""' in c]
    assert source_cell.index(cpp_extension.SOURCE.read_text().strip()) > 0
    assert "load_extension(source=CUBE_CPP)" in source_cell
    # A reader's edit: CubeUntracked's backward in ATen ops instead of the kernel. Autograd
    # records ATen ops, so the gradient now has a grad_fn and a second derivative.
    edited = source_cell.replace(
        "return {cube_backward_kernel(grad_outputs[0], x)};",
        "return {grad_outputs[0] * 3 * x * x};",
    )
    assert edited != source_cell
    index = cells.index(source_cell)
    until = next(i for i, c in enumerate(cells) if "grad_x.grad_fn" in c)
    output = _run_script(
        [*cells[:index], edited, *cells[index + 1 : until + 1]],
        tmp_path, {cpp_extension.CACHE_DIR_VARIABLE: str(tmp_path / "cache")},
    )  # fmt: skip
    assert "grad_x.grad_fn: None" not in output
    assert _printed(output, "grad_x.grad_fn:") != "grad_x.grad_fn: None"
    assert "RuntimeError" not in output


def test_an_operator_whose_backward_operator_is_never_listed_is_reported():
    from sphinx.directives.code import LiteralIncludeReader

    found = []
    page = PageListings(warn=found.append)
    options = {"start-after": "# -- cube ---", "end-before": "def _batch_first"}
    path = FUNCTIONS / "custom_ops.py"
    config = SimpleNamespace(source_encoding="utf-8")
    text, _ = LiteralIncludeReader(str(path), options, config).read()
    assert page.define(path, options, text) is not None
    page.finish()
    assert len(found) == 1 and "`cube_backward`, which no cell defines" in found[0]


def test_a_module_a_listing_uses_by_name_is_not_shadowed_by_a_later_import_of_that_name():
    # plot_07: LayerNormSavesStatistics calls layer_norm.statistics (the module), then a cell
    # imports the function layer_norm; the listing then takes statistics from the listing above.
    page = PageListings(warn=pytest.fail)
    statistics = _define(page, "layer_norm.py", "statistics")
    broken = _define(page, "failures.py", "LayerNormSavesStatistics")  # completed by rewrite
    code = page.rewrite(
        "import torch\n\nfrom double_backward.functions.layer_norm import layer_norm\n\n"
        "x = torch.randn(2, 3, dtype=torch.float64)\n"
        "y = LayerNormSavesStatistics.apply(x, (3,), None, None, 1e-5)\n"
    )
    assert "layer_norm.statistics" not in broken[0] and "statistics(" in broken[0]
    namespace = _run([statistics[0], broken[0], code])
    x = namespace["x"]
    torch.testing.assert_close(
        namespace["y"], torch.nn.functional.layer_norm(x, (3,), eps=1e-5)
    )
    assert callable(namespace["layer_norm"]) and not hasattr(
        namespace["layer_norm"], "statistics"
    )
