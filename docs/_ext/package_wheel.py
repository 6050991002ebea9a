"""The package's wheel, built with the docs and served by the site, and the line that installs it.

Readers install ``double_backward`` from the site they read, not from PyPI (the project has no
release there yet; installing the bare name would install whoever registers it). So the build:

- builds the wheel with ``python -m build --no-isolation`` from a copy of the sources (nothing is
  written into the repository), reproducibly: ``SOURCE_DATE_EPOCH`` (1980-01-01 if unset) fixes
  the timestamps, so two builds give byte-identical wheels; the wheel is cached by a digest of
  what goes into it;
- copies it to ``wheels/`` in the HTML output;
- writes ``pip install <html_baseurl>/wheels/<wheel>`` where readers need it: the notebooks'
  first cell (:func:`first_notebook_cell`), a "Run it yourself" paragraph above every example's
  download buttons, and the ``install-command`` directive (``docs/index.md``).

The base URL is ``html_baseurl`` (``conf.py`` takes Read the Docs' ``READTHEDOCS_CANONICAL_URL``;
``-D html_baseurl=...`` sets it anywhere). Without one the build says how to set it, the first cell
stops with a clear message and the pages say to install from a clone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

# What the wheel is built from, relative to the repository root.
WHEEL_SOURCES = ("pyproject.toml", "README.pypi.md", "src")
WHEELS_DIR = "wheels"  # in the HTML output
DEFAULT_SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip can hold
NO_BASE_URL_HELP = (
    "Set the site's address with `-D html_baseurl=https://.../` "
    "(nox -s docs -- -D html_baseurl=https://.../); Read the Docs sets it from "
    "READTHEDOCS_CANONICAL_URL."
)


def _source_files(root: Path) -> list[Path]:
    files = []
    for name in WHEEL_SOURCES:
        path = root / name
        candidates = sorted(path.rglob("*")) if path.is_dir() else [path]
        files += [
            f
            for f in candidates
            if f.is_file()
            and "__pycache__" not in f.parts
            and ".egg-info" not in str(f)
        ]
    return files


def build_wheel(root: Path, cache: Path) -> Path:
    """Build (or reuse) the wheel of the project at ``root``; return its path."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_SOURCE_DATE_EPOCH)
    hasher = hashlib.sha256(f"{epoch}\0{sys.version}".encode())
    for path in _source_files(root):
        hasher.update(path.relative_to(root).as_posix().encode() + b"\0")
        hasher.update(path.read_bytes())
    out = cache / hasher.hexdigest()[:16]
    wheels = sorted(out.glob("*.whl"))
    if len(wheels) == 1:
        return wheels[0]
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        for name in WHEEL_SOURCES:
            source = root / name
            if source.is_dir():
                shutil.copytree(
                    source,
                    tree / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                )
            else:
                tree.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, tree / name)
        command = [sys.executable, "-m", "build", "--wheel", "--no-isolation",
                   "--outdir", str(out), str(tree)]  # fmt: skip
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env={**os.environ, "SOURCE_DATE_EPOCH": epoch},
        )
    wheels = sorted(out.glob("*.whl"))
    if result.returncode != 0 or len(wheels) != 1:
        raise RuntimeError(
            f"package_wheel: {' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"
        )
    return wheels[0]


def base_url(app: Sphinx) -> str:
    """The site's absolute address, ending in '/', or '' when the build does not know it."""
    url = (app.config.html_baseurl or "").strip()
    return url if not url or url.endswith("/") else url + "/"


def install_command(app: Sphinx) -> str | None:
    """``pip install <url of the wheel>``, or None without a base URL."""
    url = base_url(app)
    if not url:
        return None
    return f"pip install {url}{WHEELS_DIR}/{app.env.package_wheel_name}"


def first_notebook_cell(app: Sphinx) -> str:
    """The notebooks' first cell: install the package from the site, unless it is there."""
    command = install_command(app)
    check = (
        "import importlib.util\n\n"
        'if importlib.util.find_spec("double_backward") is None:\n'
    )
    if command is None:
        return (
            "# The double_backward package these examples import, installed from the site.\n"
            + check
            + "    raise RuntimeError(\n"
            '        "This notebook was built without the address of its site, so it cannot "\n'
            '        "install the double_backward package. Download the notebook from the "\n'
            '        "published site, or install the package from a clone of the repository "\n'
            '        "(pip install .) and run this cell again."\n'
            "    )"
        )
    return (
        "# The double_backward package these examples import, from the site (not PyPI).\n"
        + check
        + f"    %{command}"
    )


def _build(app: Sphinx) -> None:
    root = Path(app.confdir).parent
    wheel = build_wheel(root, Path(app.confdir) / "_build" / "wheel")
    app.env.package_wheel_path = str(wheel)
    app.env.package_wheel_name = wheel.name
    if not base_url(app):
        logger.info(
            "package_wheel: no base URL, so the notebooks' first cell stops with a message "
            "and the pages say to install from a clone. " + NO_BASE_URL_HELP
        )


class install_command_node(nodes.General, nodes.Element):
    """Where the install command goes; filled when the page is written (the URL may change)."""


class InstallCommand(SphinxDirective):
    """``install-command``: a shell block that installs the package from this site."""

    def run(self) -> list[nodes.Node]:
        return [install_command_node()]


def _install_nodes(app: Sphinx) -> list[nodes.Node]:
    command = install_command(app)
    if command is None:
        text = "# This build has no site address. From a clone of the repository:\npip install ."
    else:
        text = command
    block = nodes.literal_block(text, text, language="bash")
    return [block]


def _fill(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    for placeholder in list(doctree.findall(install_command_node)):
        placeholder.replace_self(_install_nodes(app))
    # Every gallery example: a "Run it yourself" paragraph above its download buttons.
    for footer in list(doctree.findall(nodes.container)):
        if "sphx-glr-footer-example" in footer["classes"]:
            intro = nodes.paragraph(
                "",
                "Run it yourself: install the package this page imports, then run the "
                "script with python or the notebook top to bottom (its first cell "
                "installs the package too).",
            )
            parent = footer.parent
            index = parent.index(footer)
            for offset, node in enumerate([intro, *_install_nodes(app)]):
                parent.insert(index + offset, node)


def _copy_wheel(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        target = Path(app.outdir) / WHEELS_DIR
        target.mkdir(exist_ok=True)
        shutil.copyfile(app.env.package_wheel_path, target / app.env.package_wheel_name)


def setup(app: Sphinx) -> dict[str, object]:
    app.add_node(install_command_node)
    app.add_directive("install-command", InstallCommand)
    app.connect("builder-inited", _build)
    app.connect("doctree-resolved", _fill)
    app.connect("build-finished", _copy_wheel)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
