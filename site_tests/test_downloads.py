"""The downloads as a reader runs them, from the site built for and served on 127.0.0.1.

In a venv with nothing of this project (``reader``): the Function a page lists is code the
reader edits, and the edit changes what runs; a missing program (Graphviz's ``dot``, a C++
compiler) is named by the first cell before anything fails; with the site down, the first cell
stops naming the address it tried; the package installs with torch and NumPy only, and an extra
on request. Run by ``nox -s site``, offline: the extras' dependencies come from a wheelhouse
filled at install time.
"""

from __future__ import annotations

import functools
import re
import subprocess
from http.server import ThreadingHTTPServer
from pathlib import Path

import nbformat
import pytest
import tomllib
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from packaging.requirements import Requirement

from .checks import ROOT
from .conftest import QuietHandler, installed, layered_venv, serve

# The line plot_01 prints about the gradient's graph: the name of grad_x.grad_fn's type.
GRAD_FN_LINE = re.compile(r"^grad_x\.grad_fn:\s+(\S+)$", flags=re.M)
# The listing's edit: save a detached x, cutting grad_x's graph back to x (no grad_fn then).
SAVE, SAVE_DETACHED = "ctx.save_for_backward(x)", "ctx.save_for_backward(x.detach())"


def _download(reader_site, stem: str, suffix: str, tmp_path: Path) -> Path:
    (path,) = reader_site.html.glob(f"_downloads/*/{stem}{suffix}")
    target = tmp_path / path.name
    target.write_bytes(path.read_bytes())
    return target


def _execute(notebook, reader, folder: Path, allow_errors: bool = False):
    reader.uninstall()
    client = NotebookClient(
        notebook, timeout=600, kernel_name=reader.kernel, allow_errors=allow_errors,
        resources={"metadata": {"path": str(folder)}},
    )  # fmt: skip
    client.execute()
    return notebook


def _stream(cell, name: str) -> str:
    return "".join(
        output.get("text", "")
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream" and output.get("name") == name
    )


def _errors(notebook) -> list[tuple[int, str]]:
    return [
        (index, output["ename"])
        for index, cell in enumerate(notebook.cells)
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]


# -- the listing is code ----------------------------------------------------------------------


def test_editing_the_listed_function_changes_what_the_notebook_prints(
    reader_site, reader, tmp_path
):
    path = _download(reader_site, "plot_01_saving_inputs", ".ipynb", tmp_path)
    notebook = nbformat.read(path, as_version=4)
    (listing,) = [
        cell for cell in notebook.cells
        if cell.cell_type == "code" and "class Square(" in cell.source
    ]  # fmt: skip
    assert SAVE in listing.source
    original = _execute(notebook, reader, tmp_path)
    stdout = "".join(_stream(cell, "stdout") for cell in original.cells)
    assert GRAD_FN_LINE.search(stdout)[1] != "NoneType"
    # dot is on PATH here: the first cell says nothing about it.
    assert "dot" not in _stream(original.cells[0], "stderr")

    edited = nbformat.read(path, as_version=4)
    (listing,) = [cell for cell in edited.cells if "class Square(" in cell.source]
    listing.source = listing.source.replace(SAVE, SAVE_DETACHED)
    # The second derivative then fails in later cells: that too is the edit taking effect.
    edited = _execute(edited, reader, tmp_path, allow_errors=True)
    stdout = "".join(_stream(cell, "stdout") for cell in edited.cells)
    assert GRAD_FN_LINE.search(stdout)[1] == "NoneType"


def test_editing_the_listed_function_changes_what_the_script_prints(
    reader_site, reader, tmp_path
):
    script = _download(reader_site, "plot_01_saving_inputs", ".py", tmp_path)
    assert reader_site.install_from_page(script) == []
    text = script.read_text()
    assert text.count(SAVE) == 1

    def run() -> str:
        result = subprocess.run(
            [reader.python, script.name], cwd=tmp_path, capture_output=True, text=True
        )
        return result.stdout

    assert GRAD_FN_LINE.search(run())[1] != "NoneType"
    script.write_text(text.replace(SAVE, SAVE_DETACHED))
    assert GRAD_FN_LINE.search(run())[1] == "NoneType"


# -- what is missing is said first ------------------------------------------------------------


def test_without_dot_the_first_cell_says_so_and_only_the_graph_cells_fail(
    reader_site, reader, tmp_path, monkeypatch
):
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # the kernel inherits it: no dot
    path = _download(reader_site, "plot_01_saving_inputs", ".ipynb", tmp_path)
    notebook = _execute(nbformat.read(path, as_version=4), reader, tmp_path, True)
    message = _stream(notebook.cells[0], "stderr")
    assert "Graphviz's `dot` program is not on PATH" in message
    for platform in (
        "apt-get install graphviz",
        "brew install graphviz",
        "conda install",
    ):
        assert platform in message
    # What the message promises: the cells that show a graph fail, every other cell runs.
    errors = _errors(notebook)
    assert errors, "no cell failed without dot"
    assert {name for _, name in errors} == {"ExecutableNotFound"}
    for index, _ in errors:
        assert "graph" in notebook.cells[index].source.splitlines()[-1]


def test_without_dot_the_script_says_so_first_and_runs_whole(
    reader_site, reader, tmp_path
):
    script = _download(reader_site, "plot_01_saving_inputs", ".py", tmp_path)
    assert reader_site.install_from_page(script) == []
    empty = tmp_path / "bin"
    empty.mkdir()
    result = subprocess.run(
        [reader.python, script.name], cwd=tmp_path, capture_output=True, text=True,
        env={"PATH": str(empty), "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-1500:]
    assert result.stderr.startswith(
        "Graphviz's `dot` program is not on PATH: this script runs"
    )


def test_without_a_compiler_the_cpp_pages_first_cell_says_so(
    reader_site, reader, tmp_path, monkeypatch
):
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-c++"))
    path = _download(reader_site, "plot_18_cpp_extension", ".ipynb", tmp_path)
    notebook = nbformat.read(path, as_version=4)
    notebook.cells = notebook.cells[:1]
    message = _stream(_execute(notebook, reader, tmp_path).cells[0], "stderr")
    assert f"No C++ compiler: `{tmp_path / 'no-such-c++'}` is not on PATH" in message
    assert "sudo apt-get install g++" in message and "xcode-select --install" in message
    assert "Python headers" not in message  # this Python has them


# -- a failed install stops the notebook ------------------------------------------------------


def test_with_the_site_down_the_first_cell_stops_naming_the_address(
    reader_site, reader, tmp_path
):
    path = _download(reader_site, "plot_01_saving_inputs", ".ipynb", tmp_path)
    # The site on a server of this test's own, so that it can be stopped (made last: a
    # failure above would leave its socket open for a later test's warning).
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0),
        functools.partial(QuietHandler, directory=str(reader_site.html)),
    )
    notebook = nbformat.read(path, as_version=4)
    # The install, then a cell importing the package.
    notebook.cells = [
        notebook.cells[0],
        nbformat.v4.new_code_cell("import double_backward"),
    ]
    for url in serve(reader_site.html, server):
        text = nbformat.writes(notebook).replace(reader_site.base_url, url)
        assert url in text
        running = _execute(nbformat.reads(text, as_version=4), reader, tmp_path)
        assert _errors(running) == []  # served: it installs, the next cell imports
    with pytest.raises(CellExecutionError) as error:
        _execute(nbformat.reads(text, as_version=4), reader, tmp_path)
    message = str(error.value)
    assert f"pip could not install double_backward 0.1.0 from {url}/wheels/" in message
    assert "opens in a browser" in message and "download the wheel" in message
    assert "ModuleNotFoundError" not in message  # stopped at the first cell


# -- the install takes what is needed ---------------------------------------------------------


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-index", *args],
        capture_output=True, text=True,
    )  # fmt: skip


def test_the_package_installs_with_torch_and_numpy_only_and_an_extra_on_request(
    reader_site, reader, tmp_path
):
    assert reader.bare_python and reader.wheelhouse, (
        "nox -s site sets the bare reader venv and the wheelhouse"
    )
    # A venv of this test's own over the bare one, which the other workers' venvs build on.
    python, wheelhouse = layered_venv(reader.bare_python, tmp_path / "venv"), reader.wheelhouse
    (wheel,) = (reader_site.html / "wheels").glob("*.whl")
    url = f"{reader_site.base_url}/wheels/{wheel.name}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    graphs = {
        Requirement(r).name.lower() for r in extras["graphs"]
        if Requirement(r).marker is None or Requirement(r).marker.evaluate()
    }  # fmt: skip
    before = installed(python)
    assert {"torch", "numpy"} <= set(before) and not graphs & set(before)
    try:
        # No index: anything beyond what the venv has would fail the install.
        plain = _pip(python, f"double-backward @ {url}")
        assert plain.returncode == 0, plain.stderr
        assert set(installed(python)) - set(before) == {"double-backward"}
        used = subprocess.run(
            [python, "-c", "import double_backward as db, torch; "
             "x = torch.tensor(1.5, dtype=torch.float64, requires_grad=True); "
             "assert db.check(db.Square.apply, x).ok"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert used.returncode == 0, used.stderr
        drawing = subprocess.run(
            [python, "-c", "import double_backward.graph"],
            capture_output=True,
            text=True,
        )
        assert 'pip install "double-backward[graphs] @' in drawing.stderr

        extra = _pip(
            python, "--find-links", str(wheelhouse), f"double-backward[graphs] @ {url}"
        )
        assert extra.returncode == 0, extra.stderr
        assert set(installed(python)) - set(before) == {"double-backward", *graphs}
        drawing = subprocess.run(
            [python, "-c", "import double_backward.graph"],
            capture_output=True,
            text=True,
        )
        assert drawing.returncode == 0, drawing.stderr
    finally:
        added = set(installed(python)) - set(before)
        if added:
            subprocess.run(
                [python, "-m", "pip", "uninstall", "--yes", "--quiet", *sorted(added)],
                check=True,
            )
