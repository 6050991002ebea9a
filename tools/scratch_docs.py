"""Build the docs in a scratch copy of the repository (used by the benchmark and site checks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from sphinx_build import arguments

ROOT = Path(__file__).resolve().parents[1]
# The sources a docs build reads (pyproject.toml and README.pypi.md: the wheel the site serves);
# build outputs are left behind.
SOURCES = ("docs", "examples", "src", "pyproject.toml", "README.md", "README.pypi.md")
_IGNORE = shutil.ignore_patterns(
    ".git",
    ".nox",
    "_build",
    "auto_examples",
    "gen_modules",
    "__pycache__",
    "*.egg-info",
)


def copy_sources(destination: Path) -> Path:
    """Copy what a docs build reads into ``destination`` and return it."""
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, destination / name, ignore=_IGNORE)
        else:
            destination.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    return destination


def build_html(
    tree: Path, out: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the project's sphinx-build command on ``tree``/docs into ``tree``/``out``.

    Doctrees go beside the HTML, not inside it, so the HTML tree holds only what is served.
    Exits with the build's output when the build fails.
    """
    command = [sys.executable, "-m", "sphinx", *arguments("docs", out, *extra)]
    result = subprocess.run(command, cwd=tree, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        sys.exit(
            f"{' '.join(command)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result
