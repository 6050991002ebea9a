"""The package's lazy top-level names."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import double_backward
from double_backward.functions import saving_inputs


def test_top_level_names_are_the_defining_modules_objects():
    assert double_backward.Square is saving_inputs.Square
    assert sorted(double_backward.__all__) == sorted(double_backward._EXPORTS)
    assert set(double_backward.__all__) <= set(dir(double_backward))


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        double_backward.Nope  # noqa: B018


# Run in a fresh interpreter where torchviz and graphviz cannot be imported, as in a venv with
# torch and NumPy only: the checker must import, and check a Function, without them.
WITHOUT_DRAWING_PACKAGES = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torchviz", "graphviz"):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Refuse())
"""


def test_the_checker_needs_neither_torchviz_nor_graphviz():
    code = WITHOUT_DRAWING_PACKAGES + (
        "import torch, double_backward.checker as checker\n"
        "from double_backward import Square\n"
        "print(checker.check(Square.apply, torch.randn(3)).ok)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.stdout.strip() == "True", result.stderr


def test_the_refusal_is_real_the_drawing_helper_fails_without_them():
    # The control: the same interpreter set-up does stop an import of torchviz.
    code = WITHOUT_DRAWING_PACKAGES + "import double_backward.graph\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "No module named" in result.stderr


# The names the API reference documents, at the addresses it documents them (issue 37: the
# checker split into sub-packages by role, its public API unchanged).
DOCUMENTED_CHECKER_NAMES = {
    "double_backward": ["check", "check_model"],
    "double_backward.checker": [
        "check", "main", "Report", "Problem", "DOCS_URL", "PAGES", "FULL_MODE_UP_TO",
        "JACOBIAN_ENTRIES", "TOLERANCES",
    ],
    "double_backward.checker.model": ["check_model", "ModelReport", "Break", "FIXES", "fix_for"],
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(DOCUMENTED_CHECKER_NAMES))
def test_the_checkers_public_names_stay_where_the_reference_documents_them(module):
    imported = importlib.import_module(module)
    missing = [name for name in DOCUMENTED_CHECKER_NAMES[module] if not hasattr(imported, name)]
    assert missing == []


def test_the_checker_is_laid_out_in_sub_packages_by_role():
    import double_backward.checker as checker
    from double_backward.checker.model import check as model_check

    folder = Path(checker.__file__).parent
    modules = {p.name for p in folder.glob("*.py")}
    assert modules == {"__init__.py", "__main__.py"}  # no flat modules left beside the three
    packages = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    assert packages == {"function", "model", "shared"}
    assert double_backward.check_model is model_check.check_model
