"""editable_listings: a listed Function becomes code, and the cells after it use that code.

The pages these model: plot_03 (``Sinh`` and the wrapper ``sinh`` listed, then imported from
the package), plot_06 (two listings named ``Square``, one imported under another name, the other
reached as ``modern.Square``), plot_13 (a wrapper of a listed class imported, not listed).
Each page's cells are run in one namespace, as a notebook runs them, with the listing edited:
the edit must change what the later cells compute.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from editable_listings import PageListings, module_name

import double_backward

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


@pytest.mark.parametrize(
    "options",
    [{"pyobject": "Square.forward"}, {"pyobject": "Square", "lines": "1-3"}],
)
def test_a_method_or_a_selection_of_lines_stays_a_listing(options):
    page = PageListings(warn=pytest.fail)
    assert page.define(FUNCTIONS / "saving_inputs.py", options, "x = 1\n") is None


def test_a_custom_operator_stays_a_listing():
    # Defined again in a notebook that imported the package, it would be registered twice.
    page = PageListings(warn=pytest.fail)
    text = (
        '@torch.library.custom_op("double_backward::cube", mutates_args=())\n'
        "def cube(x: torch.Tensor) -> torch.Tensor:\n    return x**3\n"
    )
    assert page.define(FUNCTIONS / "custom_ops.py", {"pyobject": "cube"}, text) is None
