"""Contributor sessions: ``nox`` runs tests and docs; ``nox -s serve`` previews the docs live."""

from __future__ import annotations

import os
import shutil
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


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite with coverage of src/ (at least 95% of lines and branches)."""
    require_graphviz(session)
    install(session, "test")
    session.run("pytest", "--cov", "--cov-report=term-missing", *session.posargs)


@nox.session(reuse_venv=True)
def docs(session: nox.Session) -> None:
    """Build the HTML docs, executing every example. Extra arguments go to sphinx-build."""
    require_graphviz(session)
    install(session, "docs")
    session.run(
        "sphinx-build",
        "-W",
        "--keep-going",
        "-n",
        "-b",
        "html",
        "docs",
        str(DOCS_OUT),
        *session.posargs,
    )


@nox.session(reuse_venv=True)
def serve(session: nox.Session) -> None:
    """Preview the docs at http://127.0.0.1:8000, rebuilding when a page or example changes."""
    require_graphviz(session)
    install(session, "serve")
    session.run(
        "sphinx-autobuild",
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
        "--watch",
        "examples",
        "--watch",
        "src",
        "--ignore",
        str(ROOT / "docs" / "auto_examples"),
        "--ignore",
        str(ROOT / "docs" / "gen_modules"),
        "docs",
        str(DOCS_OUT),
        *session.posargs,
    )


@nox.session(reuse_venv=True)
def bench(session: nox.Session) -> None:
    """Time clean, no-change and one-edit docs builds against the examples run alone."""
    require_graphviz(session)
    install(session, "docs")
    session.run("python", "benchmarks/docs_build.py", *session.posargs)
