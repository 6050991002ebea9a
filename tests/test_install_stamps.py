"""The install stamps and the venv sets of noxfile.py (tools/install_stamps.py), run with a
stand-in for nox's session: what is installed again, what is skipped, and what is removed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import install_stamps  # noqa: E402


class CommandFailed(Exception):
    """What nox raises for a command that exits non-zero."""


class StandInSession:
    """Records what nox's ``session.run_install`` would run, and returns what nox returns:
    True after a command ran, None where nox skipped it (``-R``, a reused venv), or raises."""

    def __init__(self, outcome: str = "ran") -> None:
        self.outcome, self.installed, self.logged = outcome, [], []

    def run_install(self, *command: str, **run: object) -> bool | None:
        if self.outcome == "skipped":
            return None
        self.installed.append(command)
        if self.outcome == "failed":
            raise CommandFailed("Returned code 1")
        return True

    def log(self, message: str) -> None:
        self.logged.append(message)


PINS = {"requirements": ["torch"], "constraints": "torch==2.13.0\n"}
PIP = ("python", "-m", "pip", "install", "torch")


def test_the_first_install_runs_and_records_what_it_depended_on(tmp_path):
    session, stamp = StandInSession(), tmp_path / install_stamps.STAMP
    install_stamps.install_once(session, stamp, PINS, *PIP)
    assert session.installed == [PIP]
    assert json.loads(stamp.read_text()) == PINS


def test_an_unchanged_install_is_skipped_and_says_so(tmp_path):
    stamp = tmp_path / install_stamps.STAMP
    install_stamps.install_once(StandInSession(), stamp, PINS, *PIP)
    again = StandInSession()
    install_stamps.install_once(again, stamp, dict(reversed(PINS.items())), *PIP)
    assert again.installed == []  # the same inputs in another order are the same
    assert "nothing changed" in again.logged[0]


def test_a_changed_pin_installs_again_and_records_the_new_pins(tmp_path):
    stamp = tmp_path / install_stamps.STAMP
    install_stamps.install_once(StandInSession(), stamp, PINS, *PIP)
    changed, session = {**PINS, "constraints": "torch==2.14.1\n"}, StandInSession()
    install_stamps.install_once(session, stamp, changed, *PIP)
    assert session.installed == [PIP]
    assert json.loads(stamp.read_text()) == changed


def test_a_failed_install_leaves_no_stamp_so_the_next_run_installs(tmp_path):
    stamp = tmp_path / install_stamps.STAMP
    install_stamps.install_once(StandInSession(), stamp, PINS, *PIP)
    changed = {**PINS, "constraints": "torch==2.14.1\n"}
    with pytest.raises(CommandFailed):
        install_stamps.install_once(StandInSession("failed"), stamp, changed, *PIP)
    assert not stamp.exists()  # the old stamp is gone too: the venv is half changed
    session = StandInSession()
    install_stamps.install_once(session, stamp, PINS, *PIP)
    assert session.installed == [PIP]


def test_an_install_nox_skipped_writes_no_stamp(tmp_path):
    stamp = tmp_path / install_stamps.STAMP
    install_stamps.install_once(StandInSession("skipped"), stamp, PINS, *PIP)
    assert not stamp.exists()
    session = StandInSession()
    install_stamps.install_once(session, stamp, PINS, *PIP)
    assert session.installed == [PIP]


def test_a_venv_is_made_once_and_a_stamp_without_its_venv_is_dropped(tmp_path):
    venv = tmp_path / "reader"
    venv.mkdir()
    (venv / install_stamps.STAMP).write_text(json.dumps(PINS))  # its venv removed by hand
    session = StandInSession()
    python = install_stamps.make_venv(session, venv)
    assert python == venv / "bin" / "python"
    assert session.installed == [(sys.executable, "-m", "venv", str(venv))]
    assert not (venv / install_stamps.STAMP).exists()
    python.parent.mkdir(parents=True)
    python.touch()
    (venv / install_stamps.STAMP).write_text(json.dumps(PINS))
    again = StandInSession()
    install_stamps.make_venv(again, venv)
    assert again.installed == []
    assert (venv / install_stamps.STAMP).exists()


def _venv_set(cache: Path, name: str, used_at: int) -> Path:
    folder = cache / name
    (folder / "tests").mkdir(parents=True)
    (folder / install_stamps.LAST_USED).touch()
    os.utime(folder / install_stamps.LAST_USED, (used_at, used_at))
    return folder


def test_the_newest_sets_are_kept_with_the_current_one_and_the_rest_removed(tmp_path):
    oldest, old, newer = (
        _venv_set(tmp_path, name, used_at)
        for name, used_at in (("oldest", 1000), ("old", 2000), ("newer", 3000))
    )
    npm_cache = tmp_path / "not-a-set"  # no .last-used: never removed
    npm_cache.mkdir()
    current = tmp_path / "current"
    removed = install_stamps.prune_sets(current, keep=2)
    assert sorted(removed) == sorted([oldest, old])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["current", "newer", "not-a-set"]
    assert (current / install_stamps.LAST_USED).exists()


def test_the_current_set_is_kept_even_when_another_looks_newer(tmp_path):
    current = _venv_set(tmp_path, "current", 1000)
    future = _venv_set(tmp_path, "future", 2**40)  # a clock that was wrong when it was used
    assert install_stamps.prune_sets(current, keep=1) == []
    assert current.exists() and future.exists()
