"""Try `nox -s serve` the way CI does: start it, fetch the index once, stop it.

`nox -s serve` previews the docs until it is stopped, so CI cannot just run it. This starts it
(reusing the venv `nox -s serve --install-only` made: ``--no-install``), waits until
http://127.0.0.1:8000/ serves the site's index, then stops the whole process group. It fails
when the index does not come within ``--timeout`` seconds or the session exits first, and
prints the session's output then.

    python3 tools/try_serve.py [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INDEX = "http://127.0.0.1:8000/"
TITLE = b"<title>double-backward"  # the index page's title: not some other server's page


def fetch(url: str) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait")
    args = parser.parse_args()
    if fetch(INDEX) is not None:
        sys.exit(f"something already serves {INDEX}: stop it first")
    with tempfile.TemporaryFile() as log:
        session = subprocess.Popen(
            [sys.executable, "-m", "nox", "--no-install", "-s", "serve"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: nox, sphinx-autobuild, Sphinx
        )  # fmt: skip
        deadline = time.monotonic() + args.timeout
        page = None
        try:
            while time.monotonic() < deadline and session.poll() is None:
                page = fetch(INDEX)
                if page is not None:
                    break
                time.sleep(2)
            exit_status = session.poll()  # None: still serving, as it should be
        finally:
            if session.poll() is None:
                os.killpg(session.pid, signal.SIGTERM)
                try:
                    session.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(session.pid, signal.SIGKILL)
                    session.wait()
        log.seek(0)
        output = log.read().decode(errors="replace")
    if page is None or TITLE not in page:
        print(output[-6000:])
        if exit_status is not None:
            print(f"nox -s serve exited ({exit_status}) before serving the index at {INDEX}")
        else:
            print(f"nox -s serve did not serve the index at {INDEX} in {args.timeout:.0f} s")
        return 1
    print(f"nox -s serve served the index at {INDEX} ({len(page)} bytes); stopped it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
