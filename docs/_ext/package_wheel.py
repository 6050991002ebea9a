"""The package's wheel, built with the docs and served by the site, and the line that installs it.

Readers install ``double_backward`` from the site they read, not from PyPI (the project has no
release there yet; installing the bare name would install whoever registers it). So the build:

- builds the wheel with ``python -m build --no-isolation`` from a copy of the sources (nothing is
  written into the repository), reproducibly: ``SOURCE_DATE_EPOCH`` (1980-01-01 if unset) fixes
  the timestamps, so two builds give byte-identical wheels; the wheel is cached by a digest of
  what goes into it;
- copies it to ``wheels/`` in the HTML output;
- writes ``pip install "double-backward[pages] @ <html_baseurl>/wheels/<wheel>"`` (the package
  with every extra the pages use, from that address: never PyPI) where readers need it: a "Run
  it yourself" paragraph above every example's download buttons, the scripts' header and the
  ``install-command`` directive (``docs/index.md``);
- writes the notebooks' first cell (:func:`first_notebook_cell`): it installs that wheel unless
  the same version is installed, stops with a message naming the address when pip fails, and
  says which program the page needs is missing (Graphviz's ``dot``; a C++ compiler and the
  Python headers on the C++ page), how to install it, and what runs without it; the scripts
  start with the same check (:func:`prerequisites_check`).

The base URL is ``html_baseurl`` (``conf.py`` takes Read the Docs' ``READTHEDOCS_CANONICAL_URL``;
``-D html_baseurl=...`` sets it anywhere). Without one the build says how to set it, the first cell
stops with a clear message and the pages say to install from a clone.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
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


EXTRA = (
    "pages"  # every extra the pages use: graphs, plots, the C++ example's build tools
)


def wheel_url(app: Sphinx) -> str | None:
    """The address of the wheel on the site, or None without a base URL."""
    url = base_url(app)
    return f"{url}{WHEELS_DIR}/{app.env.package_wheel_name}" if url else None


def requirement(url: str) -> str:
    """What pip installs: the package with the pages' extras, from ``url`` (never PyPI)."""
    return f"double-backward[{EXTRA}] @ {url}"


def install_command(app: Sphinx) -> str | None:
    """``pip install "double-backward[pages] @ <url of the wheel>"``, or None without a base URL."""
    url = wheel_url(app)
    return None if url is None else f'pip install "{requirement(url)}"'


# -- what a page needs besides Python packages -----------------------------------------------

DOT = "dot"  # Graphviz's program: notebooks draw the graphs with it
CPP = "cpp"  # a C++ compiler and the Python headers: the C++ extension example builds with them


def page_needs(source: str) -> frozenset[str]:
    """The programs an example's code needs, from the package modules it imports."""
    needs = set()
    if re.search(r"\bdouble_backward\.graph\b", source):
        needs.add(DOT)
    if re.search(r"\bdouble_backward\.functions\.cpp_extension\b", source):
        needs.add(CPP)
    return frozenset(needs)


def _literals(text: str, indent: str) -> str:
    """``text`` as adjacent Python string literals, one per line of about 80 columns.

    A piece holding ``{...}`` is an f-string: the message may name what the check found.
    """
    pieces = []
    for line in text.splitlines(keepends=True):
        wrapped = textwrap.wrap(
            line.rstrip("\n"), 76 - len(indent), drop_whitespace=False
        )
        wrapped = wrapped or [""]
        wrapped[-1] += "\n" if line.endswith("\n") else ""
        pieces += wrapped
    return "\n".join(
        indent + ("f" if "{" in piece else "") + json.dumps(piece, ensure_ascii=False)
        for piece in pieces
    )


def _print_if(condition: str, message: str) -> str:
    return (
        f"if {condition}:\n    print(\n"
        + _literals(message, " " * 8)
        + ",\n        file=sys.stderr,\n    )\n"
    )


DOT_INSTALL = (
    "  Debian/Ubuntu: sudo apt-get install graphviz\n"
    "  Fedora/RHEL:   sudo dnf install graphviz\n"
    "  macOS:         brew install graphviz\n"
    "  Windows:       winget install graphviz (then add its bin folder to PATH)\n"
    "  conda:         conda install -c conda-forge graphviz"
)
CPP_WITHOUT = {
    "notebook": "the cells that build or call the extension fail (unless a build is cached "
    "in ~/.cache/double_backward or $DOUBLE_BACKWARD_CACHE_DIR); the other cells run.",
    "script": "the script stops where it first builds the extension (unless a build is "
    "cached in ~/.cache/double_backward or $DOUBLE_BACKWARD_CACHE_DIR).",
}


def _dot_check(kind: str) -> str:
    without = (
        "the cells that show a graph fail (graphviz.backend.ExecutableNotFound); every "
        "other cell runs. Install it, then restart the kernel:"
        if kind == "notebook"
        else "this script runs whole without it: it builds the graphs but does not draw "
        "them (graph.render() would need dot). To draw them, install it:"
    )
    return _print_if(
        'shutil.which("dot") is None',
        f"Graphviz's `dot` program is not on PATH: {without}\n{DOT_INSTALL}",
    )


def _cpp_check(kind: str) -> str:
    compiler = (
        "No C++ compiler: `{_compiler}` is not on PATH, and this page builds a C++ "
        f"extension: {CPP_WITHOUT[kind]} Install one:\n"
        "  Debian/Ubuntu: sudo apt-get install g++\n"
        "  Fedora/RHEL:   sudo dnf install gcc-c++\n"
        "  macOS:         xcode-select --install\n"
        "  conda:         conda install -c conda-forge cxx-compiler\n"
        "or set CXX to a compiler's path."
    )
    headers = (
        "No Python headers: {_headers} does not exist, and this page builds a C++ "
        f"extension against them: {CPP_WITHOUT[kind]} Install them:\n"
        "  Debian/Ubuntu: sudo apt-get install python3-dev (or "
        "python{sys.version_info.major}.{sys.version_info.minor}-dev)\n"
        "  Fedora/RHEL:   sudo dnf install python3-devel\n"
        "  macOS, conda, uv and pyenv Pythons ship them: reinstall that Python."
    )
    return (
        '_compiler = os.environ.get("CXX") or "c++"  # what torch runs\n'
        + _print_if("shutil.which(_compiler) is None", compiler)
        + '_headers = Path(sysconfig.get_paths()["include"]) / "Python.h"\n'
        + _print_if("not _headers.is_file()", headers)
    )


# The comment that opens the check of the programs a page needs, in the notebook's first cell
# after the install code (site_tests/test_site.py splits the cell there).
PROGRAMS_CHECK = "# The programs this page needs besides Python packages, checked first."


def prerequisites_check(needs: frozenset[str], kind: str) -> str:
    """Code that says, before anything fails, which program the page needs is missing.

    ``kind`` is "notebook" or "script": a script never draws its graphs, so it runs without
    ``dot``, and says so. Empty when the page needs no program.
    """
    if not needs:
        return ""
    imports = ["import shutil", "import sys"]
    if CPP in needs:
        imports = ["import os", "import shutil", "import sys", "import sysconfig",
                   "from pathlib import Path"]  # fmt: skip
    checks = ([_dot_check(kind)] if DOT in needs else []) + (
        [_cpp_check(kind)] if CPP in needs else []
    )
    return (
        PROGRAMS_CHECK + "\n"
        + "\n".join(imports) + "\n\n" + "\n".join(checks)
    )  # fmt: skip


def _install_code(app: Sphinx) -> str:
    url = wheel_url(app)
    if url is None:
        return (
            "# The double_backward package these examples import, installed from the site.\n"
            "import importlib.util\n\n"
            'if importlib.util.find_spec("double_backward") is None:\n'
            "    raise RuntimeError(\n"
            '        "This notebook was built without the address of its site, so it cannot "\n'
            '        "install the double_backward package. Download the notebook from the "\n'
            '        "published site, or install the package from a clone of the repository "\n'
            '        "(pip install .) and run this cell again."\n'
            "    )\n"
        )
    version = app.env.package_wheel_name.split("-")[1]
    return (
        "# The double_backward package these examples import, from the site (not PyPI), with\n"
        "# the extras the pages use. The version this notebook was built with, no other.\n"
        "import importlib\n"
        "import importlib.metadata\n"
        "import subprocess\n"
        "import sys\n\n"
        f'WHEEL = "{url}"\n'
        f'VERSION = "{version}"\n'
        "try:\n"
        '    installed = importlib.metadata.version("double-backward")\n'
        "except importlib.metadata.PackageNotFoundError:\n"
        "    installed = None\n"
        "if installed != VERSION:\n"
        f'    requirement = f"double-backward[{EXTRA}] @ {{WHEEL}}"\n'
        '    command = [sys.executable, "-m", "pip", "install", requirement]\n'
        "    pip = subprocess.run(command, capture_output=True, text=True)\n"
        "    if pip.returncode != 0:\n"
        "        raise RuntimeError(\n"
        '            f"pip could not install double_backward {VERSION} from {WHEEL} "\n'
        '            f"(exit status {pip.returncode}):\\n{pip.stderr.strip()[-1500:]}\\n\\n"\n'
        '            "Check that this address opens in a browser (the site may be down, or "\n'
        '            "you may be offline or behind a proxy pip is not configured for). Or "\n'
        '            "download the wheel from the site, run pip install '
        f'\\"double-backward[{EXTRA}] @ <the downloaded file>\\" "\n'
        '            "in this environment, and run this cell again."\n'
        "        )\n"
        "    importlib.invalidate_caches()\n"
        '    now = importlib.metadata.version("double-backward")\n'
        "    if now != VERSION:\n"
        "        raise RuntimeError(\n"
        '            f"{WHEEL} installed double_backward {now}, not {VERSION}: this notebook "\n'
        '            "was built for another wheel. Download the notebook again from the site."\n'
        "        )\n"
        '    if installed is not None and "double_backward" in sys.modules:\n'
        "        raise RuntimeError(\n"
        '            f"double_backward {installed} was already imported in this kernel; "\n'
        '            f"{VERSION} is now installed: restart the kernel and run this cell again."\n'
        "        )\n"
    )


def first_notebook_cell(app: Sphinx, needs: frozenset[str] = frozenset()) -> str:
    """The notebooks' first cell: install the package from the site unless that version is
    there (stopping with a message if pip fails), then check the programs the page needs."""
    check = prerequisites_check(needs, "notebook")
    return _install_code(app) + ("\n" + check if check else "")


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


def _install_nodes(app: Sphinx, script: str | None = None) -> list[nodes.Node]:
    """The install command; on a build without a site address (a local one), the steps that
    run this page from the clone the build was made in: install it, then run the script."""
    command = install_command(app)
    if command is not None:
        text = command
    elif script is None:
        text = '# In the folder of your clone of the repository:\npip install ".[pages]"'
    else:
        text = (
            f"# 1. Download {script} with the button below.\n"
            '# 2. In the folder of your clone of the repository:\npip install ".[pages]"\n'
            f"# 3. Where you saved the script:\npython {script}"
        )
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
            script = f"{docname.rsplit('/', 1)[-1]}.py"
            for offset, node in enumerate([intro, *_install_nodes(app, script)]):
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
