""".ci/run's first step: it stops at once, saying how much to free, when the disk is too small."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

CI_RUN = Path(__file__).resolve().parents[1] / ".ci" / "run"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def check_disk(
    need_mb: int, venv_mb: int, cache: Path, venv_set_mb: int = 0
) -> subprocess.CompletedProcess[str]:
    """Run .ci/run's own check_disk function (cut out of the script) with the given needs;
    the sessions' venvs are looked for in ``cache/nox/set``."""
    function = re.search(r"^check_disk\(\) \{\n.*?^\}\n", CI_RUN.read_text(), re.M | re.S)
    assert function, "check_disk() not found in .ci/run"
    script = (f"DISK_NEED_MB={need_mb}\nTORCH_2_14_VENV_MB={venv_mb}\n"
              f"VENV_SET_MB={venv_set_mb}\nVENV_SET={cache / 'nox' / 'set'}\n"
              f"{function[0]}check_disk\n")  # fmt: skip
    return subprocess.run(
        ["bash", "-c", script], cwd=cache.parent, capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "HOME": str(cache.parent),
             "DOUBLE_BACKWARD_CACHE_DIR": str(cache)},
    )  # fmt: skip


def free_mb(path: Path) -> int:
    return shutil.disk_usage(path).free // 2**20


def test_a_disk_with_room_passes_and_says_what_it_has(tmp_path):
    result = check_disk(1, 1, tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "a run needs 2 MB (to install: torch 2.14.1's venv;the sessions' venvs" in result.stdout


def test_a_disk_too_small_stops_the_run_saying_how_much_to_free(tmp_path):
    need = free_mb(tmp_path) + 10**6  # a million MB more than there is
    result = check_disk(need, 0, tmp_path / "cache")
    assert result.returncode == 1
    match = re.search(r"free (\d+) MB more", result.stderr)
    assert match, result.stderr
    assert abs(int(match[1]) - 10**6) < 10**4  # others may write or free a little meanwhile


def test_the_venv_is_counted_only_when_the_cache_lacks_it(tmp_path):
    cache = tmp_path / "cache"
    without = check_disk(1, free_mb(tmp_path) + 10**6, cache)
    assert without.returncode == 1
    # check_disk names the venv after the ABI of the python3 it finds on PATH.
    abi = subprocess.run(
        ["python3", "-c", "import sys; print('py%d%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    python = cache / "venvs" / f"torch-2.14.1-{abi}" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("")
    python.chmod(0o755)
    cached = check_disk(1, free_mb(tmp_path) + 10**6, cache)
    assert cached.returncode == 0, cached.stderr
    assert "to install: the sessions' venvs" in cached.stdout


def fake_python(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("")
    path.chmod(0o755)


def test_the_sessions_venvs_are_counted_only_when_the_cache_lacks_them(tmp_path):
    cache = tmp_path / "cache"
    too_much = free_mb(tmp_path) + 10**6
    assert check_disk(1, 0, cache, venv_set_mb=too_much).returncode == 1
    fake_python(cache / "nox" / "set" / "tests" / "bin" / "python")
    abi = subprocess.run(
        ["python3", "-c", "import sys; print('py%d%d' % sys.version_info[:2])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    fake_python(cache / "venvs" / f"torch-2.14.1-{abi}" / "bin" / "python")
    cached = check_disk(1, too_much, cache, venv_set_mb=too_much)
    assert cached.returncode == 0, cached.stderr
    assert "a run needs 1 MB (torch 2.14.1's venv and the sessions' venvs already" in cached.stdout
