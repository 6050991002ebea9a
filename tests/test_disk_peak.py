"""tools/disk_peak.py: the peak disk use of a command, how `.ci/run`'s disk need was measured."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "disk_peak.py"
REPORT = re.compile(r"used before (\d+) MB, peak (\d+) MB \(\+(\d+)\), end (\d+) MB \(\+(-?\d+)\)")


def run_tool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(TOOL), *args], cwd=cwd, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip


def test_a_file_written_then_removed_shows_in_the_peak_not_at_the_end(tmp_path):
    # 256 MB, held for two seconds: sampled many times at 0.05 s. Other tests writing at the
    # same time can only add to the peak; the margin covers one of them removing a file.
    size_mb = 256
    script = (
        "import os, time; path = 'big'; "
        f"open(path, 'wb').write(os.urandom({size_mb} * 2**20)); "
        "os.fsync(os.open(path, os.O_RDONLY)); time.sleep(2); os.remove(path)"
    )
    result = run_tool("--interval", "0.05", "--", sys.executable, "-c", script, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    before, peak, growth, end, _ = map(int, REPORT.search(result.stdout).groups())
    assert growth == peak - before
    assert growth >= size_mb // 2, result.stdout
    assert not (tmp_path / "big").exists()


def test_the_commands_exit_status_is_passed_on(tmp_path):
    result = run_tool("--", sys.executable, "-c", "raise SystemExit(3)", cwd=tmp_path)
    assert result.returncode == 3
    assert "exited 3" in result.stdout


def test_no_command_is_a_clear_error(tmp_path):
    result = run_tool("--", cwd=tmp_path)
    assert result.returncode == 2
    assert "no command: give it after --" in result.stderr
