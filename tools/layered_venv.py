"""A new venv that sees what another venv has installed, and installs into itself alone."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path


def layered_venv(base_python: str | Path, target: Path) -> Path:
    """A new venv at ``target`` that sees what ``base_python``'s environment has installed.

    It has no packages of its own: its site-packages adds the base's site folders (their .pth
    files too), so torch and the extras are not installed again, and pip (the base's, run by
    the new venv's python) installs into it alone; the base is never changed. Returns the new
    venv's python.
    """
    base_sites = subprocess.run(
        [base_python, "-c", "import site, sys; "
         "print('\\n'.join(p for p in sys.path if p.endswith('-packages')))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(target)], check=True)
    python = target / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    adds = "; ".join(f"site.addsitedir({site!r})" for site in base_sites)
    Path(purelib, "layered-on-base.pth").write_text(f"import site; {adds}\n")
    return python


def installed(python: str | Path) -> dict[str, str]:
    """What pip lists installed for ``python`` (a layered venv's base included): name
    (lower case) to version."""
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return {entry["name"].lower(): entry["version"] for entry in json.loads(listed)}
