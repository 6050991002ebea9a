"""complete_downloads and package_wheel, on the pieces that need no Sphinx build.

The whole conversion is checked on the built site by ``nox -s site`` (site_tests/); these
cover what the site does not show yet: a C++ source included with options, and the first cell
of a build without a base URL.
"""

from __future__ import annotations

import os
import re
from types import SimpleNamespace

import pytest

import complete_downloads
from complete_downloads import LITERALINCLUDE, ROLE, _included_code
from package_wheel import first_notebook_cell

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


def test_with_a_base_url_the_first_cell_installs_the_wheel_from_it():
    cell = first_notebook_cell(_app("https://example.org/db"))
    assert re.search(
        r"^    %pip install https://example\.org/db/wheels/double_backward-0\.1\.0-py3-none-any"
        r"\.whl$",
        cell,
        flags=re.M,
    )
    assert "double-backward" not in cell  # never the PyPI name


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
        "../src/pkg/module.py", "auto_examples/images/a.svg"
    }
