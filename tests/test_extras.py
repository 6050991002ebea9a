"""The extras: torch and NumPy are all the package requires; the rest is behind extras.

Pattern modelled: a library whose optional parts import optional dependencies and, when one is
missing, raise an ImportError naming the extra to install (as pandas and xarray do).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import tomllib
import torch
from packaging.requirements import Requirement

from double_backward import _extras

PYPROJECT = tomllib.loads(
    (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
)["project"]


def _names(requirements) -> set[str]:
    return {Requirement(requirement).name for requirement in requirements}


def test_torch_and_numpy_are_the_only_required_dependencies():
    assert _names(PYPROJECT["dependencies"]) == {"torch", "numpy"}


@pytest.mark.parametrize("extra", ["graphs", "plots", "cpp"])
def test_the_messages_name_what_pyproject_puts_in_each_extra(extra):
    declared = {
        str(requirement)
        for requirement in map(Requirement, PYPROJECT["optional-dependencies"][extra])
        if requirement.marker is None or requirement.marker.evaluate()
    }
    assert {str(Requirement(r)) for r in _extras.EXTRAS[extra]} == declared


def test_pages_is_every_extra():
    extras = PYPROJECT["optional-dependencies"]
    union = set().union(*(extras[name] for name in ("graphs", "plots", "cpp")))
    assert set(extras["pages"]) == union


@pytest.mark.parametrize("missing", ["torchviz", "graphviz"])
def test_drawing_graphs_without_the_graphs_extra_names_it(monkeypatch, missing):
    monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, "double_backward.graph", raising=False)
    with pytest.raises(ImportError) as error:
        importlib.import_module("double_backward.graph")
    message = str(error.value)
    assert f"needs {missing}" in message
    assert 'pip install "double-backward[graphs] @' in message
    assert '"torchviz==0.0.3" "graphviz>=0.20"' in message


def test_the_checker_and_the_functions_import_without_any_extra(monkeypatch):
    for module in ("torchviz", "graphviz", "matplotlib", "ninja"):
        monkeypatch.setitem(sys.modules, module, None)
    for name in [m for m in sys.modules if m.startswith("double_backward")]:
        monkeypatch.delitem(sys.modules, name)
    double_backward = importlib.import_module("double_backward")
    x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    assert double_backward.check(double_backward.Square.apply, x).ok


def test_building_the_cpp_example_without_ninja_names_the_cpp_extra(
    monkeypatch, tmp_path
):
    from double_backward.functions import cpp_extension

    monkeypatch.setitem(sys.modules, "ninja", None)
    monkeypatch.setattr(cpp_extension.shutil, "which", lambda name: None)
    with pytest.raises(ImportError) as error:
        cpp_extension._compile(tmp_path, "unused")
    assert 'pip install "double-backward[cpp] @' in str(error.value)
    assert '"ninja>=1.11"' in str(error.value)
