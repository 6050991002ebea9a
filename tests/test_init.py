"""The package's lazy top-level names."""

from __future__ import annotations

import subprocess
import sys

import pytest

import double_backward
from double_backward import saving_inputs


def test_top_level_names_are_the_defining_modules_objects():
    assert double_backward.Square is saving_inputs.Square
    assert sorted(double_backward.__all__) == sorted(double_backward._EXPORTS)
    assert set(double_backward.__all__) <= set(dir(double_backward))


def test_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        double_backward.Nope  # noqa: B018


def test_importing_the_scraper_does_not_import_torch():
    code = "import sys, double_backward.scraper; print('torch' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True
    )
    assert result.stdout.strip() == "False", result.stderr
