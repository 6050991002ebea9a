"""Run a command and report how much disk it took at its peak: how `.ci/run`'s need was measured.

    python3 tools/disk_peak.py [--path DIR] [--interval S] -- COMMAND [ARG ...]

Samples the used space of the filesystem holding DIR (default: the current folder) every S
seconds while COMMAND runs, then prints the used space before, at the peak and at the end, in
MB, and exits with COMMAND's status. The filesystem's whole use is measured, so run it on a
machine where nothing else writes much at the same time.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time

MB = 1024 * 1024


def used_mb(path: str) -> int:
    return shutil.disk_usage(path).used // MB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default=".", help="a folder on the filesystem to watch")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command: give it after --, for example -- bash .ci/run")
    if args.interval <= 0:
        parser.error(f"--interval must be a positive number of seconds, not {args.interval}")

    before = peak = used_mb(args.path)
    process = subprocess.Popen(command)
    while process.poll() is None:
        peak = max(peak, used_mb(args.path))
        time.sleep(args.interval)
    end = used_mb(args.path)
    peak = max(peak, end)
    print(
        f"disk_peak: used before {before} MB, peak {peak} MB (+{peak - before}), "
        f"end {end} MB (+{end - before}); {' '.join(command)} exited {process.returncode}",
        flush=True,
    )
    return process.returncode


if __name__ == "__main__":
    sys.exit(main())
