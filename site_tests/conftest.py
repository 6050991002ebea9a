"""Fixtures: the built site, served on 127.0.0.1, and Debian's Chromium driven by Playwright.

Also a reader's venv (torch, no double_backward) and a site built for it with its base URL
set to the loopback address that serves it, so its downloads install the package from it.
"""

from __future__ import annotations

import functools
import html
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from .checks import CHROMIUM, CHROMIUM_ARGS, ROOT

sys.path.insert(0, str(ROOT / "tools"))
from scratch_docs import build_html, copy_sources  # noqa: E402

SITE = Path(os.environ.get("DOUBLE_BACKWARD_SITE", ROOT / "docs" / "_build" / "html"))


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve(directory: Path, server: ThreadingHTTPServer | None = None) -> Iterator[str]:
    """Serve ``directory`` on a free loopback port (or with ``server``); yield its base URL."""
    if server is None:
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


@dataclass
class Reader:
    """A reader's venv: torch and the package's dependencies, never double_backward itself.

    ``python`` has the dependencies of every extra the pages use too (installed in advance:
    the checks run offline); ``bare_python`` only what the package requires, and
    ``wheelhouse`` the wheels of the "graphs" extra, to install it on request.
    """

    python: Path
    kernel: str
    bare_python: Path | None = None
    wheelhouse: Path | None = None

    def uninstall(self, _download: Path | None = None) -> list[str]:
        """Remove double_backward (a notebook's first cell installed it); problems, if any."""
        subprocess.run(
            [
                self.python,
                "-m",
                "pip",
                "uninstall",
                "--yes",
                "--quiet",
                "double-backward",
            ],
            capture_output=True,
        )
        left = subprocess.run([self.python, "-c", "import double_backward"],
                              capture_output=True)  # fmt: skip
        return [] if left.returncode else ["double_backward is still importable"]


@pytest.fixture(scope="session")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reader]:
    python = os.environ.get("DOUBLE_BACKWARD_READER_PYTHON")
    if not python:
        pytest.fail(
            "set DOUBLE_BACKWARD_READER_PYTHON (nox -s site does) to a venv's python"
        )
    # The downloads must not need Sphinx; torch must be there, as for any reader.
    for module, present in (("torch", True), ("sphinx", False)):
        found = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
        assert (found.returncode == 0) == present, (
            f"{module} in the reader's venv: {found}"
        )
    # A Jupyter kernel running the reader's python, found through JUPYTER_PATH.
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec = jupyter / "kernels" / "double-backward-reader" / "kernel.json"
    spec.parent.mkdir(parents=True)
    spec.write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "reader", "language": "python",
    }))  # fmt: skip
    saved = {
        name: os.environ.get(name)
        for name in ("JUPYTER_PATH", "PIP_DISABLE_PIP_VERSION_CHECK")
    }
    os.environ["JUPYTER_PATH"] = os.pathsep.join(
        filter(None, [str(jupyter), saved["JUPYTER_PATH"]])
    )
    os.environ["PIP_DISABLE_PIP_VERSION_CHECK"] = (
        "1"  # no request to PyPI about pip itself
    )
    bare, wheelhouse = (
        os.environ.get(name)
        for name in ("DOUBLE_BACKWARD_BARE_READER_PYTHON", "DOUBLE_BACKWARD_WHEELHOUSE")
    )
    reader = Reader(
        Path(python),
        "double-backward-reader",
        Path(bare) if bare else None,
        Path(wheelhouse) if wheelhouse else None,
    )
    reader.uninstall()
    yield reader
    reader.uninstall()
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@dataclass
class ReaderSite:
    """A site built with its base URL set to the loopback address that serves it."""

    html: Path
    second_html: Path  # a second clean build, for the reproducibility check
    base_url: str
    reader: Reader

    def install_from_page(self, download: Path) -> list[str]:
        """Run the install line the download's page shows, in the reader's venv."""
        found = self.reader.uninstall()
        page = self.html / "auto_examples" / f"{download.stem}.html"
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
        lines = set(re.findall(r"^pip install (.+)$", text, flags=re.M))
        expected = f"double-backward[pages] @ {self.base_url}/"
        if len(lines) != 1 or not shlex.split(next(iter(lines)))[0].startswith(expected):
            return [*found, f"{page.name}: expected one install line from {self.base_url}, "
                            f"found {sorted(lines)}"]  # fmt: skip
        result = subprocess.run(
            [self.reader.python, "-m", "pip", "install", "--quiet",
             *shlex.split(next(iter(lines)))],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode:
            found.append(
                f"{download.name}: the page's install line failed: {result.stderr[-800:]}"
            )
        return found


@pytest.fixture(scope="session")
def reader_site(
    tmp_path_factory: pytest.TempPathFactory, reader: Reader
) -> Iterator[ReaderSite]:
    """Two clean builds with SOURCE_DATE_EPOCH; the first served on the URL it was built for."""
    root = tmp_path_factory.mktemp("reader-site")
    first = root / "first" / "html"
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(first))
    )
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600"}
    # The second build starts with an empty C++ build cache, so a page that printed whether
    # the extension was compiled now or loaded from the cache would differ.
    second_env = {**env, "DOUBLE_BACKWARD_CACHE_DIR": str(root / "empty-cache")}
    for name, build_env in (("first", env), ("second", second_env)):
        tree = copy_sources(root / name)
        build_html(tree, "html", "-D", f"html_baseurl={url}/", env=build_env)
    for base_url in serve(first, server):
        yield ReaderSite(first, root / "second" / "html", base_url, reader)
