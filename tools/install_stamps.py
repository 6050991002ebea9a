"""Installs that run only when what they install changed, and the venv sets the cache keeps.

noxfile.py calls these with nox's session object. Nothing here imports nox, so that
tests/test_install_stamps.py runs them with a stand-in session and temporary folders.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

# In a venv (or npm's prefix): what its last successful install depended on (install_once).
STAMP = "double-backward-installed.json"
# In a set of venvs: touched by each run that installs into the set (prune_sets).
LAST_USED = ".last-used"


def install_once(session: Any, stamp: Path, depends_on: dict, *command: str,
                 **run: object) -> None:  # fmt: skip
    """Run an install ``command`` (``session.run_install``'s arguments) unless ``stamp``
    records that it succeeded with the same ``depends_on`` (its inputs, as JSON).

    pip re-applying an install that has nothing to change still resolves every requirement
    (8 s for the tests venv, 2026-12-07), and CI re-applied six. The stamp is removed before
    the install and written after it succeeded, so an interrupted or failed install runs
    again; none is written where nox skipped the command (``-R``: the venv reused, nothing
    installed, ``run_install`` returns None).
    """
    wanted = json.dumps(depends_on, indent=1, sort_keys=True)
    if stamp.exists() and stamp.read_text() == wanted:
        session.log(f"{stamp.parent.name}: installed, nothing changed since ({stamp.name})")
        return
    stamp.unlink(missing_ok=True)
    if session.run_install(*command, **run) is not None:
        stamp.write_text(wanted)


def make_venv(session: Any, venv: Path) -> Path:
    """Make a venv at ``venv`` with this Python, unless it has one; return its python.

    A stamp left in the folder of a venv removed by hand is removed first: it would skip the
    install into the new, empty venv."""
    python = venv / "bin" / "python"
    if not python.exists():
        (venv / STAMP).unlink(missing_ok=True)
        session.run_install(sys.executable, "-m", "venv", str(venv), external=True)
    return python


def prune_sets(current: Path, keep: int) -> list[Path]:
    """Mark the set of venvs ``current`` as used now and remove all but the ``keep`` newest
    sets beside it (never ``current``, nor a folder that is not a set); the removed ones."""
    current.mkdir(parents=True, exist_ok=True)
    (current / LAST_USED).touch()
    sets = sorted(
        (path for path in current.parent.iterdir() if (path / LAST_USED).exists()),
        key=lambda path: (path / LAST_USED).stat().st_mtime, reverse=True,
    )  # fmt: skip
    removed = [old for old in sets[keep:] if old != current]
    for old in removed:
        shutil.rmtree(old, ignore_errors=True)
    return removed
