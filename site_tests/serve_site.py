"""Serve a folder on a free loopback port until a given process ends (run by conftest.py).

    python serve_site.py FOLDER PORT_FILE OWNER_PID

The reader's site is built once for all pytest-xdist workers, for the address that serves it,
so one server must outlive the worker that built it: this process, started on its own, writes
its port to PORT_FILE once it listens and exits when OWNER_PID (the pytest process that runs
the workers) is gone.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def main() -> None:
    folder, port_file, owner = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    written = port_file.with_suffix(".tmp")
    written.write_text(str(server.server_address[1]))
    written.replace(port_file)  # whole, or not yet there
    while alive(owner):
        time.sleep(1)
    server.shutdown()


if __name__ == "__main__":
    main()
