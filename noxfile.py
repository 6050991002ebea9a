"""Contributor sessions: ``nox`` runs tests and docs; ``nox -s serve`` previews the docs live."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = (
    "virtualenv"  # pip, which finds the local CPU torch wheel
)
nox.options.sessions = ["tests", "docs"]

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
# torch==2.13.0 by default; point DOUBLE_BACKWARD_CONSTRAINTS at another file to change the pins.
CONSTRAINTS = os.environ.get(
    "DOUBLE_BACKWARD_CONSTRAINTS", str(ROOT / "constraints.txt")
)
DOCS_OUT = ROOT / "docs" / "_build" / "html"
# Beside the HTML, not inside it: the HTML tree holds only what is served.
DOCTREES = ROOT / "docs" / "_build" / "doctrees"
SPHINX_BUILD = ("sphinx-build", "-W", "--keep-going", "-n", "-b", "html", "-d", str(DOCTREES),
                "docs", str(DOCS_OUT))  # fmt: skip


def install(session: nox.Session, *groups: str) -> None:
    """Install the package (editable) and the named dependency groups under the constraints."""
    requirements = [
        req
        for group in groups
        for req in nox.project.dependency_groups(PYPROJECT, group)
    ]
    session.install("-c", CONSTRAINTS, "-e", ".", *requirements)


def require_graphviz(session: nox.Session) -> None:
    """Stop at once, saying how to install it, when Graphviz's ``dot`` is not on PATH."""
    if shutil.which("dot") is None:
        session.error(
            "Graphviz's `dot` program was not found on PATH; the graphs need it.\n"
            "  Debian/Ubuntu: sudo apt-get install -y graphviz\n"
            "  macOS:         brew install graphviz\n"
            "  conda:         conda install -c conda-forge graphviz"
        )


def require_compiler(session: nox.Session) -> None:
    """Stop at once, saying how to install one, when there is no C++ compiler to build
    the C++ extension example with (torch runs ``$CXX``, else ``c++``)."""
    compiler = os.environ.get("CXX") or "c++"
    if shutil.which(compiler) is None:
        session.error(
            f"No C++ compiler: `{compiler}` was not found; the C++ extension example needs one.\n"
            "  Debian/Ubuntu: sudo apt-get install -y g++\n"
            "  macOS:         xcode-select --install\n"
            "  conda:         conda install -c conda-forge cxx-compiler\n"
            "  or set CXX to a compiler's path"
        )


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite with coverage of src/ (at least 95% of lines and branches)."""
    require_graphviz(session)
    require_compiler(session)
    install(session, "test")
    session.run("pytest", "--cov", "--cov-report=term-missing", *session.posargs)


@nox.session(reuse_venv=True)
def docs(session: nox.Session) -> None:
    """Build the HTML docs, executing every example. Extra arguments go to sphinx-build."""
    require_graphviz(session)
    require_compiler(session)
    install(session, "docs")
    session.run(*SPHINX_BUILD, *session.posargs)


@nox.session(reuse_venv=True)
def serve(session: nox.Session) -> None:
    """Preview the docs at http://127.0.0.1:8000, rebuilding when a page or example changes."""
    require_graphviz(session)
    install(session, "serve")
    watch_and_ignore = (
        "--watch", "examples", "--watch", "src",
        "--ignore", str(ROOT / "docs" / "auto_examples"),
        "--ignore", str(ROOT / "docs" / "gen_modules"),
    )  # fmt: skip
    session.run(
        "sphinx-autobuild", "--host", "127.0.0.1", "--port", "8000", *watch_and_ignore,
        "-d", str(DOCTREES), "docs", str(DOCS_OUT), *session.posargs,
    )  # fmt: skip


@nox.session(reuse_venv=True)
def bench(session: nox.Session) -> None:
    """Time clean, no-change and one-edit docs builds against the examples run alone."""
    require_graphviz(session)
    require_compiler(session)
    install(session, "docs")
    session.run("python", "benchmarks/docs_build.py", *session.posargs)


@nox.session(reuse_venv=True)
def bench_checker(session: nox.Session) -> None:
    """Time one double_backward.check against the input size, 10 to 100,000 elements."""
    install(session)
    session.run("python", "benchmarks/checker_scaling.py", *session.posargs)


@nox.session(reuse_venv=True)
def bench_functions(session: nox.Session) -> None:
    """Time each Function against its native op, count saved bytes; `-- --quick` to try."""
    install(session)
    session.run("python", "benchmarks/functions.py", *session.posargs)


RUNTIME_VENV = ROOT / ".nox" / "site-runtime"


@nox.session(reuse_venv=True)
def site(session: nox.Session) -> None:
    """Check the built site as readers meet it: browser, accessibility, links, HTML, downloads.

    Run after `nox -s docs`. Needs Debian's chromium, Java and npm (see .ci/run). Everything
    is installed first, so the checks themselves run offline: `nox -s site --install-only`,
    then `nox -R -s site` with no network.
    """
    install(session, "site")
    session.run_install("npm", "ci", "--no-audit", "--no-fund", external=True)
    # A venv with only the package and its runtime dependencies, for the downloaded scripts
    # (and the plots extra: the "What it costs" page draws with matplotlib).
    session.run_install("python", "-m", "venv", "--clear", str(RUNTIME_VENV))
    runtime_python = RUNTIME_VENV / "bin" / "python"
    session.run_install(
        str(runtime_python), "-m", "pip", "install", "--quiet", "-c", CONSTRAINTS, ".[plots]",
        external=True,
    )  # fmt: skip
    session.run(
        "pytest", "site_tests", *session.posargs,
        env={"DOUBLE_BACKWARD_RUNTIME_PYTHON": str(runtime_python)},
    )  # fmt: skip


@nox.session(python=False)
def audit(session: nox.Session) -> None:
    """Lighthouse scores (mobile) of the index and every example page; run after `docs`."""
    session.run_install("npm", "ci", "--no-audit", "--no-fund", external=True)
    session.run(sys.executable, "tools/audit.py", *session.posargs, external=True)
