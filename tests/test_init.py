"""The package's lazy top-level names."""

from __future__ import annotations

import subprocess
import sys

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
