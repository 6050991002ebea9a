"""Fixtures: the built site, served on 127.0.0.1, and Debian's Chromium driven by Playwright.

Also a reader's venv (torch, no double_backward) and a site built for it with its base URL
set to the loopback address that serves it, so its downloads install the package from it.
"""

from __future__ import annotations

import contextlib
import fcntl
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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, sync_playwright

from .checks import CHROMIUM, CHROMIUM_ARGS, ROOT

sys.path.insert(0, str(ROOT / "tools"))
# The Sphinx helpers in docs/_ext/ are plain modules that conf.py puts on sys.path; so do we.
sys.path.insert(0, str(ROOT / "docs" / "_ext"))
from layered_venv import installed, layered_venv  # noqa: E402, F401  (installed: test_downloads.py)
from scratch_docs import build_html, copy_sources  # noqa: E402
from sphinx_build import reproducible_env  # noqa: E402

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The checks that need no reader's site first, those that do after.

    pytest-xdist's worksteal gives each worker a contiguous half of this order: one worker
    starts on the checks of `nox -s docs`'s build (browser, links, HTML) while the other
    builds the reader's site and runs its downloads. In collection order both began with a
    download test and one waited, idle, for the other's build (6 minutes).
    """
    items.sort(key=lambda item: "reader_site" in getattr(item, "fixturenames", ()))


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


@pytest.fixture(scope="session")
def browser_context(browser: Browser) -> Iterator[BrowserContext]:
    """One browser context for the checks that open page after page of the served site, as a
    reader's browser keeps one: the site's shared files come from its cache after the first."""
    context = browser.new_context()
    yield context
    context.close()


@pytest.fixture
def broken_site(site: Path, tmp_path: Path) -> Path:
    """A writable copy of the site, for a test to break."""
    return Path(shutil.copytree(site, tmp_path / "site"))


@pytest.fixture
def broken_base_url(broken_site: Path) -> Iterator[str]:
    yield from serve(broken_site)


def _xdist_worker() -> str | None:
    return os.environ.get("PYTEST_XDIST_WORKER")


def shared_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every pytest-xdist worker of this run sees (the run's base temp folder)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if _xdist_worker() else base


@contextlib.contextmanager
def exclusive(lock: Path) -> Iterator[None]:
    """Hold ``lock`` (a file) against the other workers of this run."""
    with open(lock, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
    # This worker's own venv over it: the checks install and uninstall the package there.
    python = str(layered_venv(python, tmp_path_factory.mktemp("reader-venv")))
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
    clean_html: Path  # the reproducibility check's second build, made as `nox -s docs` does
    base_url: str
    reader: Reader

    def install_lines(self, example: str) -> set[str]:
        """The ``pip install`` lines the example's page shows (arguments only)."""
        (page,) = self.html.glob(f"auto_examples/*/{example}.html")
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
        return set(re.findall(r"^pip install (.+)$", text, flags=re.M))

    def install_line(self, example: str) -> str:
        """The one install line the example's page shows, from this site's address."""
        lines = self.install_lines(example)
        expected = f"double-backward[pages] @ {self.base_url}/"
        assert len(lines) == 1 and shlex.split(next(iter(lines)))[0].startswith(expected), (
            f"{example}.html: expected one install line from {self.base_url}, "
            f"found {sorted(lines)}"
        )
        return next(iter(lines))

    def install_from_page(self, download: Path, served_at: str | None = None) -> list[str]:
        """Run the install line the download's page shows, in the reader's venv (from
        ``served_at`` instead of the site's address, when given)."""
        found = self.reader.uninstall()
        lines = self.install_lines(download.stem)
        expected = f"double-backward[pages] @ {self.base_url}/"
        if len(lines) != 1 or not shlex.split(next(iter(lines)))[0].startswith(expected):
            return [*found, f"{download.stem}.html: expected one install line from "
                            f"{self.base_url}, found {sorted(lines)}"]  # fmt: skip
        line = next(iter(lines))
        if served_at is not None:
            line = line.replace(self.base_url, served_at)
        result = subprocess.run(
            [self.reader.python, "-m", "pip", "install", "--quiet", *shlex.split(line)],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode:
            found.append(
                f"{download.name}: the page's install line failed: {result.stderr[-800:]}"
            )
        return found


# The servers started by _serve_until_the_run_ends: kept, so that no Popen object is collected
# (and warns) while its process still serves.
_SERVERS: list[subprocess.Popen] = []


def _serve_until_the_run_ends(folder: Path, port_file: Path) -> str:
    """Serve ``folder`` from a process of its own that outlives this worker; its base URL.

    It stops when the pytest process running the workers (this one, without xdist) ends.
    """
    owner = os.getppid() if _xdist_worker() else os.getpid()
    _SERVERS.append(subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("serve_site.py")),
         str(folder), str(port_file), str(owner)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    ))  # fmt: skip
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the reader's site server wrote no port to {port_file} in 60 s")
        time.sleep(0.1)
    return f"http://127.0.0.1:{port_file.read_text()}"


@pytest.fixture(scope="session")
def reader_site(
    tmp_path_factory: pytest.TempPathFactory, reader: Reader
) -> Iterator[ReaderSite]:
    """A clean build made as `nox -s docs` makes it, and that build written again with its
    base URL set to the loopback address that serves it.

    The clean build is the second of the reproducibility check's pair (the first is the site
    `nox -s docs` built); it starts from an empty C++ build cache, so a page that printed
    whether the extension was compiled now or loaded from the cache would differ. Writing it
    again with a base URL runs no example (sphinx-gallery keeps their outputs while their
    sources are unchanged) and writes every page and download again: all that the base URL
    changes. Built once per run: the first pytest-xdist worker to need it builds it while the
    others wait, and all use it; a failed build is reported to each, not tried again.
    """
    shared = shared_folder(tmp_path_factory)
    tree = shared / "reader-site"
    built, failed = shared / "reader-site.json", shared / "reader-site.failed"
    with exclusive(shared / "reader-site.lock"):
        if failed.exists():
            pytest.fail(f"building the reader's site failed:\n{failed.read_text()}")
        if not built.exists():
            try:
                url = _serve_until_the_run_ends(tree / "reader-html", shared / "reader-site.port")
                env = {**os.environ, **reproducible_env(),
                       "DOUBLE_BACKWARD_CACHE_DIR": str(shared / "empty-cache")}  # fmt: skip
                copy_sources(tree)
                build_html(tree, "html", env=env)
                # With the pages it read: the second build reads nothing again, only writes.
                shutil.copytree(tree / "html.doctrees", tree / "reader-html.doctrees")
                build_html(tree, "reader-html", "-D", f"html_baseurl={url}/", env=env)
            except BaseException as error:  # build_html exits with the build's output
                failed.write_text(f"{type(error).__name__}: {error}")
                raise
            built.write_text(json.dumps({"base_url": url}))
    base_url = json.loads(built.read_text())["base_url"]
    yield ReaderSite(tree / "reader-html", tree / "html", base_url, reader)
