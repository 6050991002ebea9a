"""Fixtures: the built site, served on 127.0.0.1, and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from .checks import CHROMIUM, CHROMIUM_ARGS, ROOT

SITE = Path(os.environ.get("DOUBLE_BACKWARD_SITE", ROOT / "docs" / "_build" / "html"))


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve(directory: Path) -> Iterator[str]:
    """Serve ``directory`` on a free loopback port; yield its base URL."""
    handler = functools.partial(QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def site() -> Path:
    if not (SITE / "index.html").is_file():
        pytest.exit(f"no built site at {SITE}: run `nox -s docs` first", returncode=2)
    return SITE


@pytest.fixture(scope="session")
def base_url(site: Path) -> Iterator[str]:
    yield from serve(site)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        yield browser
        browser.close()


@pytest.fixture
def broken_site(site: Path, tmp_path: Path) -> Path:
    """A writable copy of the site, for a test to break."""
    return Path(shutil.copytree(site, tmp_path / "site"))


@pytest.fixture
def broken_base_url(broken_site: Path) -> Iterator[str]:
    yield from serve(broken_site)
