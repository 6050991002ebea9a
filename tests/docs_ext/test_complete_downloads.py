"""complete_downloads and package_wheel, on the pieces that need no Sphinx build.

The whole conversion is checked on the built site by ``nox -s site`` (site_tests/); these
cover what the site does not show yet: a C++ source included with options, and the first cell
of a build without a base URL.
"""

from __future__ import annotations

import os
import re
import sys
from types import SimpleNamespace

import pytest

import complete_downloads
from complete_downloads import LITERALINCLUDE, ROLE, _fill_in, _included_code, to_markdown_parts
from package_wheel import first_notebook_cell, page_needs, prerequisites_check

CPP = """#include <torch/extension.h>

// begin: square
torch::Tensor square(const torch::Tensor& x) {
  return x * x;
}
// end: square
"""


@pytest.fixture
def env(tmp_path):
    (tmp_path / "square.cpp").write_text(CPP)
    return SimpleNamespace(
        relfn2path=lambda name, docname: (
            name,
            str(tmp_path / name.rsplit("/", 1)[-1]),
        ),
        config=SimpleNamespace(source_encoding="utf-8"),
    )


def test_a_cpp_include_becomes_a_cpp_fence_with_only_the_lines_it_selects(env):
    rest = (
        "Text before.\n\n"
        ".. literalinclude:: /../src/double_backward/functions/csrc/square.cpp\n"
        "   :start-after: // begin: square\n"
        "   :end-before: // end: square\n"
        "\nText after.\n"
    )
    match = LITERALINCLUDE.search(rest)
    assert match is not None
    # The options, and only they, are consumed.
    assert rest[match.end() :] == "\nText after.\n"
    block = _included_code(env, "auto_examples/plot_12", match)
    assert block == (
        "```cpp\ntorch::Tensor square(const torch::Tensor& x) {\n  return x * x;\n}\n```"
    )


def test_language_option_wins_over_the_file_name(env):
    rest = ".. literalinclude:: square.cpp\n   :language: c++\n   :lines: 1\n"
    block = _included_code(env, "index", LITERALINCLUDE.search(rest))
    assert block == "```c++\n#include <torch/extension.h>\n```"


@pytest.mark.parametrize(
    ("text", "role", "content"),
    [
        (":class:`~double_backward.Sinh`", "class", "~double_backward.Sinh"),
        (":py:func:`torch.sinh`", "func", "torch.sinh"),
        (":doc:`API reference </api>`", "doc", "API reference </api>"),
        (":math:`\\tfrac12 e^{x}`", "math", "\\tfrac12 e^{x}"),
    ],
)
def test_roles_are_found_with_their_content(text, role, content):
    match = ROLE.search(f"see {text}, then ``:not: a role``")
    assert (match["role"], match["content"]) == (role, content)


def _app(base_url: str) -> SimpleNamespace:
    return SimpleNamespace(
        config=SimpleNamespace(html_baseurl=base_url),
        env=SimpleNamespace(
            package_wheel_name="double_backward-0.1.0-py3-none-any.whl"
        ),
    )


def test_with_a_base_url_the_first_cell_installs_the_wheel_from_it_with_the_pages_extras():
    cell = first_notebook_cell(_app("https://example.org/db"))
    assert (
        'WHEEL = "https://example.org/db/wheels/double_backward-0.1.0-py3-none-any.whl"'
        in cell
    )
    assert 'VERSION = "0.1.0"' in cell
    # Never the bare PyPI name: only the name with the wheel's address.
    assert 'f"double-backward[pages] @ {WHEEL}"' in cell
    assert not re.search(r"\binstall\b[^\n]*double-backward(?!\[pages\] @)", cell)


def _run_first_cell(
    cell: str,
    installed: str | None,
    pip_status: int,
    installed_by_pip: str = "0.1.0",
    imported: bool = False,
) -> list[list[str]]:
    """Run the cell with the installed version and pip's exit status faked; pip's commands."""
    import importlib.metadata
    import subprocess

    calls = []

    def version(name: str) -> str:
        if installed is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return installed

    def run(command, **kwargs):
        nonlocal installed
        calls.append(command)
        installed = installed_by_pip
        return SimpleNamespace(returncode=pip_status, stderr="ERROR: 404 Not Found\n")

    namespace: dict[str, object] = {}
    # A fresh kernel, unless the test says the old version was imported.
    modules = {**sys.modules, "double_backward": SimpleNamespace()}
    if not imported:
        del modules["double_backward"]
    patches = (
        (importlib.metadata, "version", version),
        (subprocess, "run", run),
        (sys, "modules", modules),
    )
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    try:
        for module, name, value in patches:
            setattr(module, name, value)
        exec(compile(cell, "first cell", "exec"), namespace)
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
    return calls


def test_a_failed_install_stops_the_first_cell_naming_the_address_and_what_to_do():
    cell = first_notebook_cell(_app("https://example.org/db"))
    with pytest.raises(RuntimeError) as error:
        _run_first_cell(cell, installed=None, pip_status=1)
    message = str(error.value)
    assert (
        "https://example.org/db/wheels/double_backward-0.1.0-py3-none-any.whl"
        in message
    )
    assert "404 Not Found" in message  # what pip said
    assert "opens in a browser" in message and "download the wheel" in message


@pytest.mark.parametrize(("installed", "installs"), [(None, True), ("0.0.9", True),
                                                     ("0.1.0", False)])  # fmt: skip
def test_only_the_version_the_notebook_was_built_with_stands(installed, installs):
    cell = first_notebook_cell(_app("https://example.org/db"))
    calls = _run_first_cell(cell, installed=installed, pip_status=0)
    assert bool(calls) == installs


def test_an_older_version_already_imported_asks_for_a_restart():
    cell = first_notebook_cell(_app("https://example.org/db"))
    with pytest.raises(
        RuntimeError, match="0.0.9 was already imported .* restart the kernel"
    ):
        _run_first_cell(cell, installed="0.0.9", pip_status=0, imported=True)


def test_a_wheel_of_another_version_stops_the_first_cell():
    cell = first_notebook_cell(_app("https://example.org/db"))
    with pytest.raises(
        RuntimeError, match="installed double_backward 0.2.0, not 0.1.0"
    ):
        _run_first_cell(cell, installed=None, pip_status=0, installed_by_pip="0.2.0")


def test_the_pages_that_draw_graphs_or_build_cpp_check_for_their_programs():
    assert page_needs("from double_backward.graph import autograd_graph") == {"dot"}
    assert page_needs(
        "from double_backward.functions.cpp_extension import cube\n"
        "from double_backward.graph import autograd_graph"
    ) == {"dot", "cpp"}
    assert page_needs("from double_backward import Square") == set()
    assert prerequisites_check(frozenset(), "script") == ""
    cell = first_notebook_cell(
        _app("https://example.org/db"), frozenset({"dot", "cpp"})
    )
    assert 'shutil.which("dot")' in cell and "Python.h" in cell


@pytest.mark.parametrize("kind", ["notebook", "script"])
def test_without_dot_or_a_compiler_or_headers_the_check_says_how_to_install_each(
    kind, monkeypatch, capsys, tmp_path
):
    import sysconfig

    monkeypatch.setenv("PATH", str(tmp_path))  # no dot, no c++
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"include": str(tmp_path)})
    code = prerequisites_check(frozenset({"dot", "cpp"}), kind)
    exec(compile(code, "check", "exec"), {})
    message = capsys.readouterr().err
    assert "Graphviz's `dot` program is not on PATH" in message
    assert (
        "sudo apt-get install graphviz" in message
        and "brew install graphviz" in message
    )
    assert ("every other cell runs" if kind == "notebook" else "runs whole") in message
    assert "No C++ compiler: `c++` is not on PATH" in message
    assert "xcode-select --install" in message
    assert f"No Python headers: {tmp_path / 'Python.h'} does not exist" in message
    assert "python3-dev" in message and "python3-devel" in message


def test_with_everything_present_the_check_says_nothing(capsys):
    exec(
        compile(
            prerequisites_check(frozenset({"dot", "cpp"}), "notebook"), "c", "exec"
        ),
        {},
    )
    assert capsys.readouterr() == ("", "")


def test_without_a_base_url_the_first_cell_stops_with_a_message_when_the_package_is_missing():
    cell = first_notebook_cell(_app(""))
    namespace: dict[str, object] = {}
    code = cell.replace(
        'find_spec("double_backward")', 'find_spec("no_such_package_xyz")'
    )
    with pytest.raises(RuntimeError, match="built without the address of its site"):
        exec(compile(code, "first cell", "exec"), namespace)
    assert "pip install" not in cell.replace("(pip install .)", "")


def test_write_if_changed_keeps_the_mtime_of_a_file_that_holds_the_bytes(tmp_path):
    path = tmp_path / "plot_01.py"
    complete_downloads.write_if_changed(path, b"same")
    os.utime(path, (1_000_000, 1_000_000))
    complete_downloads.write_if_changed(path, b"same")
    assert path.stat().st_mtime == 1_000_000
    complete_downloads.write_if_changed(path, b"other")
    assert path.read_bytes() == b"other" and path.stat().st_mtime > 1_000_000


def test_a_page_stops_depending_on_its_rewritten_downloads_only(tmp_path):
    # What makes a no-change rebuild read no page: sphinx-gallery rewrites these every build.
    gallery = tmp_path / "auto_examples"
    env = SimpleNamespace(srcdir=str(tmp_path), dependencies={
        "auto_examples/plot_01": {"auto_examples/plot_01.py", "auto_examples/plot_01.zip",
                                  "../src/pkg/module.py", "auto_examples/images/a.svg"},
    })  # fmt: skip
    complete_downloads._forget_download_dependencies(
        env, "auto_examples/plot_01", [gallery / "plot_01.py", gallery / "plot_01.zip"]
    )
    assert env.dependencies["auto_examples/plot_01"] == {
        "../src/pkg/module.py",
        "auto_examples/images/a.svg",
    }


def test_raw_html_becomes_the_html_itself_and_the_text_after_it_stays():
    # An exercise's folded solution: the <details> opens in one text cell, closes in another.
    rest = (
        ".. raw:: html\n"
        "\n"
        "   <details><summary>The solution</summary>\n"
        "\n"
        "Save the input.\n"
    )
    blocks: dict[str, str] = {}
    markdown = _fill_in(to_markdown_parts(None, "page", rest, blocks), blocks)
    assert markdown == "<details><summary>The solution</summary>\n\nSave the input.\n"
