"""tools/sphinx_build.reproducible_env: the SOURCE_DATE_EPOCH every docs build of a commit uses."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sphinx_build import reproducible_env  # noqa: E402

# 2021-03-04 05:06:07 UTC, a time no other commit here has.
COMMIT_TIME = 1614834367

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


@needs_git
def test_outside_a_set_epoch_it_is_the_last_commits_time(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    date = f"@{COMMIT_TIME} +0000"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "-m", "first"], check=True,
        env={**os.environ, "GIT_COMMITTER_DATE": date, "GIT_AUTHOR_DATE": date},
    )  # fmt: skip
    assert reproducible_env(tmp_path) == {"SOURCE_DATE_EPOCH": str(COMMIT_TIME)}


def test_a_set_epoch_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "42")
    assert reproducible_env(tmp_path) == {"SOURCE_DATE_EPOCH": "42"}


@needs_git
def test_outside_a_clone_there_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert reproducible_env(tmp_path) == {}
