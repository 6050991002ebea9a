"""The project's one sphinx-build command, for nox, the scratch builds and Read the Docs.

Warnings are errors (``-W``), every one is reported (``--keep-going``), every cross-reference
must resolve (``-n``). Doctrees go beside the HTML, never inside it: the HTML tree holds only
what is served. Run as a script (Read the Docs does)::

    python tools/sphinx_build.py docs OUTPUT_DIR [more sphinx-build arguments]
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLAGS = ("-W", "--keep-going", "-n", "-b", "html")


def arguments(source: str | Path, out: str | Path, *extra: str,
              doctrees: str | Path | None = None) -> list[str]:  # fmt: skip
    """sphinx-build's arguments: the flags, doctrees beside ``out``, ``extra``, the folders."""
    if doctrees is None:
        doctrees = Path(out).parent / f"{Path(out).name}.doctrees"
    return [*FLAGS, "-d", str(doctrees), *extra, str(source), str(out)]


if __name__ == "__main__":
    source, out, *extra = sys.argv[1:]
    command = [sys.executable, "-m", "sphinx", *arguments(source, out, *extra)]
    sys.exit(subprocess.run(command).returncode)
