"""The project's one sphinx-build command, for nox, the scratch builds and Read the Docs.

Warnings are errors (``-W``), every one is reported (``--keep-going``), every cross-reference
must resolve (``-n``). Doctrees go beside the HTML, never inside it: the HTML tree holds only
what is served. Run as a script (Read the Docs does)::

    python tools/sphinx_build.py docs OUTPUT_DIR [more sphinx-build arguments]
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ("-W", "--keep-going", "-n", "-b", "html")


def arguments(source: str | Path, out: str | Path, *extra: str,
              doctrees: str | Path | None = None) -> list[str]:  # fmt: skip
    """sphinx-build's arguments: the flags, doctrees beside ``out``, ``extra``, the folders."""
    if doctrees is None:
        doctrees = Path(out).parent / f"{Path(out).name}.doctrees"
    return [*FLAGS, "-d", str(doctrees), *extra, str(source), str(out)]


def reproducible_env(repository: str | Path = ROOT) -> dict[str, str]:
    """``SOURCE_DATE_EPOCH`` for a docs build: as set, else the time of ``repository``'s last
    commit (the usual choice for reproducible builds), so that every build of one commit agrees
    (the copyright year, the wheel's and the zips' timestamps); empty outside a git clone."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return {"SOURCE_DATE_EPOCH": os.environ["SOURCE_DATE_EPOCH"]}
    try:
        last_commit = subprocess.run(
            ["git", "-C", str(repository), "log", "-1", "--format=%ct"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {"SOURCE_DATE_EPOCH": last_commit} if last_commit.isdigit() else {}


if __name__ == "__main__":
    source, out, *extra = sys.argv[1:]
    command = [sys.executable, "-m", "sphinx", *arguments(source, out, *extra)]
    sys.exit(
        subprocess.run(command, env={**os.environ, **reproducible_env()}).returncode
    )
