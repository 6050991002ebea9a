"""Checks of a built site, each returning the problems it found (an empty list: none).

Each check is a plain function so that the tests can run it twice: on the real site, where
it must find nothing, and on a deliberately broken copy, where it must find the breakage.
"""

from __future__ import annotations

import ast
import filecmp
import functools
import html
import json
import re
import subprocess
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import Browser, BrowserContext, Page, Route

ROOT = Path(__file__).resolve().parents[1]
AXE_JS = ROOT / "node_modules" / "axe-core" / "axe.min.js"
VNU_JAR = ROOT / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"

# Chromium as the issue prescribes: Debian's build, no sandbox (root), no background traffic.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]  # fmt: skip

# Nu validator messages that are wrong about our pages, each with the reason it is wrong.
VNU_FALSE_POSITIVES: dict[str, str] = {}


REDIRECT = re.compile(r'<meta http-equiv="refresh"')


def redirect_pages(site: Path) -> list[Path]:
    """The pages that only send the reader on (old addresses of moved pages), in order."""
    return [page for page in sorted(site.rglob("*.html")) if REDIRECT.search(page.read_text())]


def html_pages(site: Path, redirects: bool = False) -> list[Path]:
    """Every HTML page of the site, in a stable order; the redirects only if asked for (a
    browser leaves them at once, so there is nothing on them to look at)."""
    pages = sorted(site.rglob("*.html"))
    if redirects:
        return pages
    moved = set(redirect_pages(site))
    return [page for page in pages if page not in moved]


def page_url(base_url: str, site: Path, page: Path) -> str:
    return f"{base_url}/{page.relative_to(site).as_posix()}"


def _load_images(page: Page) -> list[str]:
    """Make every image load (lazy ones too); return the sources that did not decode, and
    the figures whose width and height attributes do not have the image's proportions."""
    return page.evaluate(
        """async () => {
            const broken = [];
            for (const img of Array.from(document.images)) {
                img.loading = "eager";
                try { await img.decode(); }
                catch (e) { broken.push(`did not decode: ${img.currentSrc || img.src}`); continue; }
                if (img.naturalWidth === 0 || img.naturalHeight === 0) {
                    broken.push(`did not decode: ${img.src}`);
                    continue;
                }
                // A figure's width and height attributes reserve its box before it loads:
                // they must have the image's own proportions, or the page jumps (or the
                // figure is distorted) when it arrives.
                const [w, h] = [img.getAttribute("width"), img.getAttribute("height")];
                if (img.classList.contains("sphx-glr-single-img") && w && h
                    && Math.abs((w / h) / (img.naturalWidth / img.naturalHeight) - 1) > 0.02) {
                    broken.push(`sized ${w}x${h}, drawn ${img.naturalWidth}x`
                                + `${img.naturalHeight}: ${img.src}`);
                }
            }
            return broken;
        }"""
    )


def _local_only(local_host: str, url: str, problems: list[str], route: Route) -> None:
    target = urlsplit(route.request.url)
    if target.scheme in ("http", "https") and target.netloc != local_host:
        problems.append(
            f"{url}: request to another host (blocked): {route.request.url}"
        )
        route.abort()
    else:
        route.continue_()


def _axe_violations(page: Page, url: str) -> list[str]:
    """Serious or critical axe-core violations on the loaded ``page``."""
    page.add_script_tag(path=str(AXE_JS))
    # Only the violations in full: axe still runs every rule on every element, and no
    # longer builds a selector for each element that passed (a third of its time here).
    results = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        f"{url}: {violation['id']} ({violation['impact']}): "
        f"{[node['target'] for node in violation['nodes']][:3]}"
        for violation in results["violations"]
        if violation["impact"] in ("serious", "critical")
    ]


def page_problems(browser: Browser, urls: list[str]) -> list[str]:
    """Each page loaded once: its console errors, page errors, failed or >= 400 requests,
    requests to other hosts, broken images, then its serious or critical axe-core violations.

    One load for both: opening and loading a page took Chromium 1.0 of the 3.4 CPU seconds
    that checking it with axe took (plot_07c, 2026-12-07), and each check needs it loaded.
    Each page is new, in one browser context for all of ``urls``, as a reader's tab is: the
    site's shared files (CSS, scripts, fonts) come from its cache after the first page, where
    a failure of theirs is recorded. A new context per page took 53 s and 75 busy CPU-s for
    25 of the site's pages, one for all 46 s and 66 (2026-12-08).
    """
    problems: list[str] = []
    context = browser.new_context()
    for url in urls:
        local_host = urlsplit(url).netloc
        page = context.new_page()
        page.on(
            "console",
            lambda m, u=url: (
                m.type == "error" and problems.append(f"{u}: console: {m.text}")
            ),
        )
        page.on("pageerror", lambda e, u=url: problems.append(f"{u}: page error: {e}"))
        page.on(
            "requestfailed",
            lambda r, u=url: problems.append(
                f"{u}: failed request {r.url} ({r.failure})"
            ),
        )
        page.on(
            "response",
            lambda r, u=url: (
                r.status >= 400 and problems.append(f"{u}: {r.status} {r.url}")
            ),
        )
        # Requests to any other host are recorded and aborted before they leave the machine.
        page.route("**/*", functools.partial(_local_only, local_host, url, problems))
        page.goto(url, wait_until="load")
        problems.extend(
            f"{url}: image {problem}" for problem in _load_images(page)
        )
        page.wait_for_load_state("networkidle")
        # Last, on the page as a reader has it, every image loaded: axe's own requests
        # (none: its script is inlined) and errors would be recorded above as well.
        problems.extend(_axe_violations(page, url))
        page.close()
    context.close()
    return problems


def search_results(browser: Browser | BrowserContext, base_url: str, query: str) -> list[str]:
    """The page titles the site's search lists for ``query``, on a new page of ``browser``
    (in a context of its own) or of a context the site's other pages share."""
    page = browser.new_page()
    page.goto(f"{base_url}/search.html?q={query}", wait_until="load")
    # searchtools.js writes a summary paragraph when the search has finished.
    page.wait_for_selector("#search-results p.search-summary", timeout=20_000)
    titles = page.locator("#search-results ul.search li > a").all_inner_texts()
    page.close()
    return titles


def html_validation_problems(site: Path) -> list[str]:
    """Errors the Nu HTML checker reports on our pages, minus listed false positives."""
    command = ["java", "-jar", str(VNU_JAR), "--errors-only", "--format", "json"]
    result = subprocess.run(
        [*command, *map(str, html_pages(site, redirects=True))], capture_output=True, text=True
    )
    messages = json.loads(result.stderr or '{"messages": []}')["messages"]
    return [
        f"{Path(m.get('url', '')).name}:{m.get('lastLine', '?')}: {m['message']}"
        for m in messages
        if m.get("type") == "error" and m["message"] not in VNU_FALSE_POSITIVES
    ]


def tree_differences(first: Path, second: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    """Files that differ between two directory trees, or exist in only one of them; files and
    folders named in ``ignore`` are left out, at every level."""
    differences = []
    pending = [filecmp.dircmp(first, second, ignore=[*filecmp.DEFAULT_IGNORES, *ignore])]
    while pending:
        comparison = pending.pop()
        here = Path(comparison.left).relative_to(first)
        differences += [f"only in first: {here / n}" for n in comparison.left_only]
        differences += [f"only in second: {here / n}" for n in comparison.right_only]
        for name in comparison.common_files:
            if (Path(comparison.left) / name).read_bytes() != (
                Path(comparison.right) / name
            ).read_bytes():
                differences.append(f"differs: {here / name}")
        pending += comparison.subdirs.values()
    return sorted(differences)


# Calls that read a clock: a page that prints what they measure differs from build to build.
LIVE_TIMING = re.compile(
    r"\b(?:time\.(?:time|perf_counter|monotonic|process_time)(?:_ns)?|timeit)\b"
)


def live_timing_problems(examples: Path) -> list[str]:
    """Example scripts that time something while the site builds.

    A timing taken at build time depends on the machine and its load, so a page that prints
    it, or a verdict drawn from it, can differ between two builds however often they are
    compared on a quiet machine. Timings come from committed measurements instead.
    """
    return [
        f"{script.name}:{number}: reads a clock at build time: {line.strip()}"
        for script in sorted(examples.rglob("plot_*.py"))
        for number, line in enumerate(script.read_text().splitlines(), start=1)
        if LIVE_TIMING.search(line) and not line.lstrip().startswith("#")
    ]


def script_problems(
    python: Path,
    scripts: list[Path],
    prepare: Callable[[Path], list[str]] | None = None,
) -> list[str]:
    """Scripts that fail when run with ``python`` from their own folder.

    ``prepare(script)``, if given, runs first (the page's install line, say) and returns its
    own problems; a script whose preparation failed is reported and not run.
    """
    problems = []
    for script in scripts:
        if prepare is not None:
            found = prepare(script)
            if found:
                problems += found
                continue
        result = subprocess.run(
            [str(python), script.name],
            cwd=script.parent,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            problems.append(
                f"{script.name}: exit {result.returncode}: {result.stderr[-1500:]}"
            )
    return problems


def notebook_problems(
    notebooks: list[Path],
    kernel_name: str = "python3",
    prepare: Callable[[Path], list[str]] | None = None,
) -> list[str]:
    """Notebooks that do not execute cleanly with nbclient, each run whole, first cell included."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    problems = []
    for path in notebooks:
        if prepare is not None:
            problems += prepare(path)
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook, timeout=600, kernel_name=kernel_name,
            resources={"metadata": {"path": str(path.parent)}},
        )  # fmt: skip
        try:
            client.execute()
        except CellExecutionError as error:
            problems.append(f"{path.name}: {str(error)[-1500:]}")
    return problems


class _CodeBlocks(HTMLParser):
    """The text of each code listing of a page: ``<pre>`` in a ``highlight-*`` block, no output."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks: list[str] = []
        self._stack: list[str] = []  # the class attribute of each open <div>
        self._pre: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "div":
            self._stack.append(classes)
        elif tag == "pre":
            inside = " ".join(self._stack)
            # Shell commands (the install line) are run before a download, not in it; the
            # install-path checks run them.
            shell = re.search(r"highlight-(bash|console|shell|sh)\b", inside)
            if (
                "highlight-" in inside
                and "sphx-glr-script-out" not in inside
                and not shell
            ):
                self._pre = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._stack:
            self._stack.pop()
        elif tag == "pre" and self._pre is not None:
            self.blocks.append("".join(self._pre))
            self._pre = None

    def handle_data(self, data: str) -> None:
        if self._pre is not None:
            self._pre.append(data)


def page_code_blocks(page: Path) -> list[str]:
    """Every code listing the page shows (code cells, included sources), not its outputs."""
    parser = _CodeBlocks()
    parser.feed(page.read_text())
    return parser.blocks


def _code_lines(text: str) -> str:
    """Text reduced to its non-blank lines, stripped."""
    return "\n".join(line.strip() for line in text.splitlines() if line.strip())


def _uncommented(text: str) -> str:
    """A script's text with each comment's leading '#' (and one space) taken off."""
    return re.sub(r"^([ \t]*)# ?", r"\1", text, flags=re.M)


def download_text(path: Path) -> str:
    """What a reader sees in a download: a script's text, or a notebook's cells, in order."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n\n".join("".join(cell["source"]) for cell in cells)
    return path.read_text()


# reST a download must not keep: roles (:class:`x`, :py:func:`y`) and directives (.. name::).
REST_ROLE = re.compile(r":(?:[a-z]+:)?[a-z][\w-]*:`")
REST_DIRECTIVE = re.compile(r"^[ \t]*(?:#[ \t]*)?\.\. [\w:-]+::", flags=re.M)


# A line of an import from the package: the downloads rewrite these so that the cells use the
# Functions the download defines (docs/_ext/editable_listings.py).
PACKAGE_IMPORT = re.compile(
    r"^(?:from double_backward[\w.]* import|import double_backward)\b"
)


def _without_package_imports(lines: list[str]) -> tuple[list[str], set[str]]:
    """``lines`` without the package's imports (parenthesised ones whole); the names bound."""
    kept, names, inside = [], set(), False
    for line in lines:
        if inside or PACKAGE_IMPORT.match(line):
            imported = line.split(" import ", 1)[-1] if not inside else line
            for name in re.split(r"[,()]", imported):
                words = name.split()
                if words:
                    names.add(words[-1])
            if PACKAGE_IMPORT.match(line) and line.startswith("import "):
                names.add(line.split()[1].split(".")[0])
            inside = (inside or "(" in line) and ")" not in line
            continue
        kept.append(line)
    return kept, names


def _unqualified(lines: list[str], names: set[str]) -> list[str]:
    """Lines with ``name.`` taken off before an attribute, for each name the package bound."""
    if not names:
        return lines
    pattern = re.compile(
        rf"(?<![\w.])(?:{'|'.join(map(re.escape, sorted(names)))})\.(?=\w)"
    )
    return [pattern.sub("", line) for line in lines]


def _in_order(needles: list[str], haystack: list[str]) -> bool:
    position = 0
    for needle in needles:
        try:
            position = haystack.index(needle, position) + 1
        except ValueError:
            return False
    return True


def _prose(download: Path) -> str:
    """What a download says in prose: a notebook's Markdown cells, a script's lines outside its
    classes and functions (its docstring, its comments)."""
    if download.suffix == ".ipynb":
        cells = json.loads(download.read_text())["cells"]
        return "\n\n".join(
            "".join(cell["source"]) for cell in cells if cell["cell_type"] == "markdown"
        )
    text = download.read_text()
    code_lines = {
        line
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for line in range(node.lineno, node.end_lineno + 1)
    }
    return "\n".join(
        line for number, line in enumerate(text.splitlines(), start=1)
        if number not in code_lines
    )  # fmt: skip


def download_problems(site: Path, gallery: str = "auto_examples") -> list[str]:
    """Downloads that keep reST, or lack a code listing their page shows.

    Every example page's script and notebook are checked: no ``literalinclude``, role or
    directive left in their prose; every code listing of the page (its code cells and the
    sources it includes) appears in each, line by line and in order (as code, or in a script as
    comment lines). The package's imports are left out of the comparison, and ``module.Name``
    read as ``Name``: the downloads rewrite them so that the cells use the Functions they define
    (``docs/_ext/editable_listings.py``).
    """
    problems = []
    pages = sorted((site / gallery).rglob("plot_*.html"))
    if not pages:
        return [f"no example pages in {site / gallery}"]
    for page in pages:
        downloads = sorted(site.glob(f"_downloads/*/{page.stem}.py")) + sorted(
            site.glob(f"_downloads/*/{page.stem}.ipynb")
        )
        if len(downloads) != 2:
            problems.append(
                f"{page.name}: expected a script and a notebook, got {downloads}"
            )
        blocks = [_code_lines(html.unescape(block)) for block in page_code_blocks(page)]
        # Lines the page itself shows as code: an included source's docstrings may use roles,
        # as the package's docstrings do, and stay as they are in the download.
        shown_code = {line for block in blocks for line in block.splitlines()}
        # Names the page's code binds by importing them from the package, in any cell.
        bound = {n for b in blocks for n in _without_package_imports(b.splitlines())[1]}
        for download in downloads:
            text = download_text(download)
            prose = "\n".join(
                line for line in _prose(download).splitlines()
                if _code_lines(_uncommented(line)) not in shown_code
            )  # fmt: skip
            for pattern in ("literalinclude", REST_ROLE, REST_DIRECTIVE):
                found = (re.search(pattern, prose) if isinstance(pattern, re.Pattern)
                         else pattern in prose and pattern)  # fmt: skip
                if found:
                    shown = found[0] if isinstance(found, re.Match) else found
                    problems.append(f"{download.name}: keeps reST {shown!r}")
            # Code as code, or (a script's included source) as comment lines. The downloads
            # register the custom operators they define as my_ops::name, not
            # double_backward::name (editable_listings.DOWNLOAD_OP_NAMESPACE): read it back.
            text = re.sub(r"""(["'])my_ops(::\w+)?\1""", r"\1double_backward\2\1", text)
            forms = [_code_lines(t).splitlines() for t in (text, _uncommented(text))]
            for block in blocks:
                lines, _ = _without_package_imports(block.splitlines())
                if not lines:
                    continue
                wanted = _unqualified(lines, bound)
                if not any(
                    _in_order(wanted, _unqualified(form, bound)) for form in forms
                ):
                    problems.append(
                        f"{download.name}: lacks code its page shows: "
                        f"{block.splitlines()[0][:80]!r}"
                    )
    return problems


# -- a script and its notebook: one source ------------------------------------------------------

# Code that behaves differently run by `python script.py` than in a Jupyter kernel: starting
# processes (spawn re-imports __main__, which a kernel's cells cannot give), the script's own
# path or arguments, IPython's display. A page whose code uses any of it has its script run
# whole as well as its notebook; every other script is checked to hold the notebook's cells.
RUNS_DIFFERENTLY_AS_A_SCRIPT = re.compile(
    r"\b(?:multiprocessing|spawn|start_processes|fork|subprocess|threading|__main__|__file__"
    r"|sys\.argv|get_ipython|IPython|display)\b"
)


def _notebook_code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def script_preamble(script: Path, notebook: Path) -> str:
    """The script's code before the notebook's second code cell (its first, the install, is
    the notebook's own): the docstring, the install line and the check for missing programs."""
    cells = _notebook_code_cells(notebook)
    text = script.read_text()
    start = text.find(cells[1]) if len(cells) > 1 else len(text)
    return text[: start if start >= 0 else len(text)]


def script_and_notebook_problems(script: Path, notebook: Path) -> list[str]:
    """Where a script is not its notebook's code: each code cell after the first (the
    notebook's install cell) must appear in the script verbatim and in order, and the script
    may have no other code, beyond its preamble, than comment lines."""
    cells = _notebook_code_cells(notebook)
    text = script.read_text()
    if len(cells) < 2:
        return [f"{notebook.name}: no code cell after the install cell"]
    problems, position, between = [], None, []
    for number, cell in enumerate(cells[1:], start=2):
        found = text.find(cell, 0 if position is None else position)
        if found < 0:
            problems.append(
                f"{script.name}: lacks the notebook's code cell {number} (in order): "
                f"{cell.splitlines()[0][:80]!r}"
            )
            continue
        if position is not None:
            between.append(text[position:found])
        position = found + len(cell)
    if position is not None:
        between.append(text[position:])
    extra = [
        line.strip() for gap in between for line in gap.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]  # fmt: skip
    if extra:
        problems.append(
            f"{script.name}: code the notebook does not have: {extra[0][:80]!r}"
            + (f" and {len(extra) - 1} more lines" if len(extra) > 1 else "")
        )
    return problems
