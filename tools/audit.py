"""Lighthouse scores of the built site, as a report (run by `nox -s audit` after `nox -s docs`).

Serves docs/_build/html on 127.0.0.1 the way static hosts do (gzip, cache headers), runs
Lighthouse (npm, mobile preset) in Debian's Chromium on every page of the site (the index, the
examples, the error index, the compatibility matrix, the API reference) but the search page,
and prints the four category scores per page. The search page is left out: Sphinx marks it
``noindex`` on purpose (a results page has nothing to index), which Lighthouse's SEO category
counts against it.
Scores are a report, not a gate: the command fails only when Lighthouse itself fails.
``--runs N`` audits each page N times and prints each category's median, as Lighthouse's
documentation advises for performance, which varies from run to run; ``--page index.html``
audits that page alone (CI does, to keep the session working).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIGHTHOUSE = ROOT / "node_modules" / ".bin" / "lighthouse"
CATEGORIES = ("performance", "accessibility", "best-practices", "seo")
CHROME_FLAGS = (
    "--headless --no-sandbox --disable-gpu --disable-background-networking "
    "--disable-component-update --disable-sync --no-first-run"
)


class StaticHostHandler(SimpleHTTPRequestHandler):
    """Serve files as static hosts (Read the Docs, GitHub Pages) do: text gzip-compressed,
    assets in _static and _images cacheable for a day. Plain ``http.server`` does neither,
    and Lighthouse would score the test server rather than the site."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def send_head(self):  # noqa: ANN201 - http.server's own signature
        path = Path(self.translate_path(self.path))
        compressible = path.suffix in {".html", ".css", ".js", ".svg", ".json", ".txt"}
        if not (
            path.is_file()
            and compressible
            and "gzip" in self.headers.get("Accept-Encoding", "")
        ):
            return super().send_head()
        body = gzip.compress(path.read_bytes(), mtime=0)
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        if "/_static/" in self.path or "/_images/" in self.path:
            self.send_header("Cache-Control", "public, max-age=86400")
        self.end_headers()
        return io.BytesIO(body)


def audit(url: str, report: Path) -> dict[str, int]:
    """Run Lighthouse on ``url``; return its category scores out of 100."""
    command = [
        str(LIGHTHOUSE), url, "--quiet", "--output=json", f"--output-path={report}",
        f"--only-categories={','.join(CATEGORIES)}", f"--chrome-flags={CHROME_FLAGS}",
    ]  # fmt: skip
    env = {**os.environ, "CHROME_PATH": "/usr/bin/chromium"}
    subprocess.run(command, check=True, env=env)
    result = json.loads(report.read_text())
    return {
        name: round(result["categories"][name]["score"] * 100) for name in CATEGORIES
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=ROOT / "docs" / "_build" / "html")
    parser.add_argument(
        "--runs", type=int, default=1, help="audits per page; each category's median is printed"
    )
    parser.add_argument(
        "--page", action="append", metavar="PATH",
        help="audit only this page (relative to the site, e.g. index.html); repeatable. "
        "CI audits one page, to keep the session working; the table audits all of them",
    )  # fmt: skip
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if not (args.site / "index.html").is_file():
        sys.exit(f"no built site at {args.site}: run `nox -s docs` first")
    pages = sorted(page.relative_to(args.site).as_posix()
                   for page in args.site.rglob("*.html") if page.name != "search.html")  # fmt: skip
    if args.page:
        unknown = sorted(set(args.page) - set(pages))
        if unknown:
            parser.error(f"--page: no such page in {args.site} (or search.html): {unknown}")
        pages = sorted(args.page)

    handler = functools.partial(StaticHostHandler, directory=str(args.site))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base_url = f"http://127.0.0.1:{server.server_address[1]}"
    width = max(len("page"), *map(len, pages)) + 2  # columns stay aligned
    header = f"{'page':{width}}" + "".join(f"{name:>16}" for name in CATEGORIES)
    if args.runs > 1:
        header += "  performance of each run"
    print(header)
    try:
        with tempfile.TemporaryDirectory() as reports:
            for number, page in enumerate(pages):
                runs = [audit(f"{base_url}/{page}", Path(reports) / f"{number}-{run}.json")
                        for run in range(args.runs)]  # fmt: skip
                scores = {name: statistics.median_low([run[name] for run in runs])
                          for name in CATEGORIES}  # fmt: skip
                each = ", ".join(str(run["performance"]) for run in runs)
                print(
                    f"{page:{width}}" + "".join(f"{scores[name]:>16}" for name in CATEGORIES)
                    + (f"  {each}" if args.runs > 1 else "")
                )
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
