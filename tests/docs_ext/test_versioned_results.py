"""Per-release committed results: written with their release and date, checked against the live
result when the installed torch is the release they were measured on, compared between
releases. The committed files of the repository are checked against this torch too."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import compatibility_matrix as matrix
import error_index
import pytest
import versioned_results as vr

# Dynamo instantiates old-style Functions while tracing them, which torch itself deprecates;
# it announces the graph break at a call into the C++ extension (the matrix shows it).
MATRIX_RUN_WARNINGS = pytest.mark.filterwarnings(
    "ignore:<class 'torch.autograd.function.Function'> should not be instantiated",
    f"ignore:{matrix.DYNAMO_PYBIND_WARNING}",
)


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(vr, "DATA_DIR", tmp_path)
    return tmp_path


def test_written_file_records_release_build_and_date(data_dir):
    file = vr.write("product", {"a": 1}, "2.14.1+cu130")
    assert file == data_dir / "product" / "torch-2.14.1.json"
    data = json.loads(file.read_text())
    assert data["torch"] == "2.14.1"
    assert data["torch_build"] == "2.14.1+cu130"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", data["measured"])
    assert vr.read(file) == vr.Measurement("2.14.1", data["measured"], {"a": 1})


def test_installed_release_is_live_and_others_committed_oldest_first(data_dir):
    vr.write("product", {"a": 1}, "2.14.1")
    vr.write("product", {"a": 3}, "2.9.0")
    measurements = vr.by_version("product", {"a": 2}, installed="2.13.0+cpu")
    assert list(measurements) == ["2.9.0", "2.13.0", "2.14.1"]
    assert measurements["2.13.0"].live and measurements["2.13.0"].results == {"a": 2}
    assert not measurements["2.14.1"].live and measurements["2.14.1"].results == {
        "a": 1
    }


def test_live_result_equal_to_its_committed_file_passes(data_dir):
    vr.write("product", {"a": 1, "b": "x"}, "2.13.0")
    # A cell added since the measurement ("c") is not measured there, not a difference.
    measurements = vr.by_version(
        "product", {"a": 1, "b": "x", "c": 0}, installed="2.13.0"
    )
    assert measurements["2.13.0"].live


def test_live_result_differing_from_its_committed_file_fails_saying_where(data_dir):
    vr.write("product", {"a": 1, "b": "x"}, "2.13.0")
    with pytest.raises(vr.ResultsDiffer) as raised:
        vr.by_version("product", {"a": 1, "b": "y"}, installed="2.13.0+cpu")
    message = str(raised.value)
    assert "torch 2.13.0" in message
    assert "b: committed 'x', live 'y'" in message
    assert "a:" not in message
    assert "nox -s matrix -- 2.13.0" in message


def test_facts_about_a_measurement_are_kept_but_not_compared(data_dir):
    vr.write("product", {"a": 1}, "2.13.0", about={"seconds": 12})
    assert vr.read(vr.path("product", "2.13.0")).about == {"seconds": 12}
    assert vr.by_version("product", {"a": 1}, installed="2.13.0")["2.13.0"].live


def test_a_slow_product_is_measured_only_for_a_release_with_no_file(data_dir):
    calls = []

    def measure():
        calls.append(1)
        return {"a": len(calls)}, {"seconds": 600}

    first = vr.committed_or_measured("slow", measure, installed="2.14.1")
    again = vr.committed_or_measured("slow", measure, installed="2.14.1+cu130")
    assert len(calls) == 1
    assert first["2.14.1"].results == again["2.14.1"].results == {"a": 1}
    assert again["2.14.1"].about == {"seconds": 600}
    assert vr.path("slow", "2.14.1").exists()


def test_changed_cells_compare_what_is_shown_among_releases_that_have_the_cell():
    measurements = {
        "2.13.0": vr.Measurement("2.13.0", "", {"a": "pass", "b": "E1", "c": "pass"}),
        "2.14.1": vr.Measurement("2.14.1", "", {"a": "pass", "b": "pass"}),
    }
    assert vr.changed_cells(measurements) == {"b": {"2.13.0": "E1", "2.14.1": "pass"}}
    assert vr.changed_cells(measurements, shown=lambda value: "same") == {}


# -- the repository's committed files ---------------------------------------------------------
def _tested_releases() -> list[str]:
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((vr.DATA_DIR.parents[1] / "pyproject.toml").read_text())
    return pyproject["tool"]["double_backward"]["tested-torch"]


@pytest.mark.parametrize("name", list(vr.PRODUCTS))
def test_every_tested_release_has_a_committed_measurement(name):
    committed = [vr.read(file).torch for file in vr.committed_files(name)]
    assert sorted(committed, key=vr.release_key) == sorted(
        _tested_releases(), key=vr.release_key
    )


@MATRIX_RUN_WARNINGS
@pytest.mark.parametrize(
    ("name", "measure"),
    [("compatibility_matrix", matrix.measure), ("error_index", error_index.measure)],
)
def test_committed_measurement_of_the_installed_torch_equals_the_live_one(
    name, measure
):
    # What the docs build checks, run by `nox -s tests_torch` on every tested release.
    installed = vr.installed_torch()
    if vr.path(name, installed) not in vr.committed_files(name):
        pytest.skip(f"nothing committed for torch {version('torch')}")
    assert vr.by_version(name, measure())[installed].live
