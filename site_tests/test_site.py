"""The built site, checked the way its readers meet it. Run by `nox -s site` after `nox -s docs`."""

from __future__ import annotations

import ast
import functools
import html
import re
import shutil
import subprocess
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

# package_wheel: docs/_ext/, which conftest.py puts on sys.path.
import nbformat
import pytest
from package_wheel import PROGRAMS_CHECK

from .checks import (
    ROOT,
    RUNS_DIFFERENTLY_AS_A_SCRIPT,
    download_problems,
    html_pages,
    html_validation_problems,
    live_timing_problems,
    notebook_problems,
    page_problems,
    page_url,
    script_and_notebook_problems,
    script_preamble,
    script_problems,
    search_results,
    tree_differences,
)
from .conftest import SITE, QuietHandler, serve
from .links import link_problems

ARTIFACTS = ROOT / "site-artifacts"
EXAMPLE_PAGE = "auto_examples/tutorial/plot_03_saving_intermediates.html"


def all_urls(site: Path, base_url: str) -> list[str]:
    return [page_url(base_url, site, page) for page in html_pages(site)]


def test_the_site_has_the_pages_the_checks_expect(site):
    names = {page.relative_to(site).as_posix() for page in html_pages(site)}
    assert {"index.html", "api.html", "search.html", EXAMPLE_PAGE} <= names


# The browser checks visit every page, a few seconds each: split into groups, so that both
# pytest-xdist workers share them (one test of every page kept one worker busy for 6 minutes).
PAGE_GROUPS = 6


def page_group(site: Path, base_url: str, group: int) -> list[str]:
    """Every PAGE_GROUPS-th page's URL, from the ``group``-th on; together, every page."""
    return all_urls(site, base_url)[group::PAGE_GROUPS]


def test_the_page_groups_cover_every_page_once(site, base_url):
    groups = [page_group(site, base_url, group) for group in range(PAGE_GROUPS)]
    assert all(groups)
    assert sorted(url for group in groups for url in group) == sorted(all_urls(site, base_url))


@pytest.mark.parametrize("group", range(PAGE_GROUPS))
def test_every_page_loads_in_chromium_without_errors_outside_requests_or_serious_axe_violations(
    site, base_url, browser, group
):
    assert page_problems(browser, page_group(site, base_url, group)) == []


@pytest.mark.parametrize(
    ("query", "expected_title"),
    [
        ("save_for_backward", "Saving the inputs"),
        ("gradgradcheck", "The four cases compared: is your backward tracked?"),
        # Ops readers ask about by name are on the built-ins page, raising or not.
        ("grid_sample", "Built-ins without double backward"),
        ("unfold", "Built-ins without double backward"),
        ("fold", "Built-ins without double backward"),
        ("max_pool2d", "Built-ins without double backward"),
        ("use_reentrant", "autograd.grad inside a checkpointed block"),
        ("GradScaler", "A gradient penalty with a GradScaler"),
        ("inference_mode", "Second derivatives inside an evaluation loop"),
    ],
)
def test_search_finds_the_pages_that_teach_a_name(
    base_url, browser_context, query, expected_title
):
    assert expected_title in search_results(browser_context, base_url, query)


def _indexed_messages() -> list[str]:
    """Every message the error index shows in a block, whole, as the built page shows it."""
    page = SITE / "errors.html"
    if not page.is_file():
        return []
    blocks = re.findall(
        r'<div class="highlight-text notranslate"><div class="highlight"><pre>(.*?)</pre>',
        page.read_text(),
        flags=re.DOTALL,
    )
    return [html.unescape(re.sub(r"<[^>]+>", "", block)).strip() for block in blocks]


def test_the_error_index_shows_messages_to_search_for():
    messages = _indexed_messages()
    assert len(messages) >= 20
    assert any("donated buffers" in message for message in messages)
    # The fused CUDA attention kernels' messages are raised at build time, on the meta device;
    # cuDNN's RNN message comes only from a committed GPU run (none yet for the probes): where
    # one recorded it, the index shows it whole.
    assert any("_scaled_dot_product_efficient_attention_backward" in m for m in messages)
    cuda_runs = sorted((ROOT / "src/double_backward/measurements/cuda").glob("torch-*.json"))
    if any("_cudnn_rnn_backward" in path.read_text() for path in cuda_runs):
        assert any(
            "Double backwards is not supported for CuDNN RNNs due to" in m for m in messages
        )
    else:
        assert not any("CuDNN" in m for m in messages)  # nothing measured, nothing shown


@pytest.mark.parametrize(
    "message", _indexed_messages(), ids=lambda message: message.splitlines()[0][:60]
)
def test_pasting_a_whole_message_into_search_finds_the_error_index(
    base_url, browser_context, message
):
    # What a reader does: the whole message, every line, pasted into the search box.
    assert "Error-message index" in search_results(
        browser_context, base_url, quote(message)
    )


def test_search_finds_nothing_for_a_nonsense_word(base_url, browser_context):
    assert search_results(browser_context, base_url, "zqxjvkwplorbt") == []


def test_light_and_dark_mode_render_the_graphs(base_url, browser):
    ARTIFACTS.mkdir(exist_ok=True)
    backgrounds = {}
    for scheme in ("light", "dark"):
        page = browser.new_page(
            color_scheme=scheme, viewport={"width": 1200, "height": 900}
        )
        page.goto(f"{base_url}/{EXAMPLE_PAGE}", wait_until="networkidle")
        backgrounds[scheme] = page.evaluate(
            "getComputedStyle(document.body).backgroundColor"
        )
        graph = page.locator("img[src$='.svg']").first
        graph.scroll_into_view_if_needed()
        assert graph.evaluate("img => img.naturalWidth") > 0
        page.screenshot(path=ARTIFACTS / f"{scheme}-mode.png", full_page=True)
        graph.screenshot(path=ARTIFACTS / f"{scheme}-mode-graph.png")
        page.close()
    assert backgrounds["light"] != backgrounds["dark"], (
        "dark mode did not change the page"
    )


def test_every_internal_link_and_anchor_resolves(site):
    assert link_problems(site) == []


def test_the_nu_validator_reports_no_errors(site):
    assert html_validation_problems(site) == []


def test_two_clean_builds_with_source_date_epoch_are_byte_identical(site, reader_site):
    # `nox -s docs`'s build (CI's comes from a clean clone) and one made here the same way
    # from an empty C++ build cache (see conftest.reader_site), both with the last commit's
    # time as SOURCE_DATE_EPOCH.
    first, second = site, reader_site.clean_html
    examples = {
        f"{script.stem}.html" for script in (ROOT / "examples").rglob("plot_*.py")
    }
    for tree in (first, second):
        assert {
            page.name for page in (tree / "auto_examples").rglob("plot_*.html")
        } == examples
    # Sphinx's .buildinfo holds a hash of the configuration, whose static and template paths
    # are absolute paths into the venv that built it (sphinx-gallery's, sphinx-copybutton's):
    # the docs session's venv there, the site session's here. Every other file is compared.
    assert tree_differences(first, second, ignore=(".buildinfo",)) == [], (
        f"{first} differs from a clean build of the same sources: if it was built on top of "
        "an earlier build, or before the last commit (SOURCE_DATE_EPOCH is that commit's "
        "time), remove docs/_build and docs/auto_examples and run `nox -s docs` again"
    )
    assert list(first.rglob("*.zip")), "the comparison should include the download zips"
    assert list(first.glob("wheels/double_backward-*.whl")), (
        "the comparison should include the package's wheel"
    )


def test_no_example_times_anything_while_the_site_builds():
    # Two builds on one machine can agree by luck; a timing printed at build time is never
    # reproducible, so it is refused at the source.
    assert live_timing_problems(ROOT / "examples") == []


def test_downloads_keep_no_rest_and_show_every_listing_of_their_page(site):
    assert download_problems(site) == []


def test_without_a_base_url_the_first_cell_stops_with_a_clear_message(
    site, reader, tmp_path
):
    # The site `nox -s docs` builds has no base URL: the first cell must say so, not guess.
    notebook = Path(
        shutil.copy(next(site.glob("_downloads/*/plot_01_*.ipynb")), tmp_path)
    )
    first_cell_only = nbformat.read(notebook, as_version=4)
    first_cell_only.cells = first_cell_only.cells[:1]
    nbformat.write(first_cell_only, notebook)
    # This worker's reader venv may hold the package a notebook installed before this test:
    # then the first cell has nothing to install, and says nothing.
    (problem,) = notebook_problems([notebook], reader.kernel, prepare=reader.uninstall)
    assert "built without the address of its site" in problem, problem


# -- the downloads, run as a reader runs them ---------------------------------------------------
#
# A page's notebook and its script are written from the same cells (docs/_ext/
# complete_downloads.py). Every notebook runs whole: its first cell installs the package from
# the site, then every cell runs in a Jupyter kernel. Each script is checked to be that
# notebook's code, cell for cell, and its own preamble (the check for missing programs) runs;
# running the same cells again under `python` would only repeat the notebook. What only a
# script run shows is run too: the install line the pages show, by plot_01's script
# (test_downloads.py, which also shows that editing it changes what it prints), and any
# page whose code behaves differently under `python` than in a kernel (processes it starts,
# its own path: RUNS_DIFFERENTLY_AS_A_SCRIPT), whose script runs whole.

# The lessons, in their sections' folders (the recipes are not among them).
LESSON_SCRIPTS = {
    script.stem: script
    for script in (ROOT / "examples").glob("*/plot_*.py")
    if script.parent.name != "recipes"
}
EXAMPLES = sorted(LESSON_SCRIPTS)
# The first lesson: its page carries the install line that test_downloads.py runs from scratch.
PLOT_01 = next(name for name in EXAMPLES if name.startswith("plot_01_"))
# Every page of the gallery, the recipes too: each has its downloads.
ALL_EXAMPLES = sorted(script.stem for script in (ROOT / "examples").glob("*/plot_*.py"))


def _example_code(example: str) -> str:
    """The example's code without its docstring and comments."""
    source = LESSON_SCRIPTS[example].read_text()
    tree = ast.parse(source)
    docstring_end = tree.body[0].end_lineno if ast.get_docstring(tree) else 0
    return "\n".join(
        line for line in source.splitlines()[docstring_end:]
        if not line.lstrip().startswith("#")
    )  # fmt: skip


RUN_AS_SCRIPTS = [
    example for example in EXAMPLES
    if RUNS_DIFFERENTLY_AS_A_SCRIPT.search(_example_code(example))
]  # fmt: skip


def _download(html: Path, example: str, suffix: str, folder: Path) -> Path:
    (path,) = html.glob(f"_downloads/*/{example}{suffix}")
    return Path(shutil.copy(path, folder))


def test_every_example_has_a_notebook_and_a_script(reader_site):
    for suffix in (".ipynb", ".py"):
        downloads = reader_site.html.glob(f"_downloads/*/plot_*{suffix}")
        assert sorted(path.stem for path in downloads) == ALL_EXAMPLES, suffix


def _install_code(notebook: Path) -> str:
    """The code of a notebook's first cell that installs the package from the site (without
    the blank line that separates it from a check that follows)."""
    first = nbformat.read(notebook, as_version=4).cells[0].source
    return first.split(PROGRAMS_CHECK)[0].rstrip()


def test_every_notebook_installs_the_package_with_the_same_code(reader_site, tmp_path):
    # test_downloads.py runs that code in a venv without the package (plot_01's notebook,
    # uninstalled before each run): so it is run once from scratch, not once per notebook.
    codes = {
        example: _install_code(_download(reader_site.html, example, ".ipynb", tmp_path))
        for example in EXAMPLES
    }
    assert '"pip", "install"' in codes[PLOT_01]
    assert reader_site.base_url in codes[PLOT_01]
    assert [name for name, code in codes.items() if code != codes[PLOT_01]] == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_notebook_runs_whole_from_the_served_site_in_the_readers_venv(
    reader_site, reader, tmp_path, example
):
    # The first cell installs the package, or finds that version installed by an earlier
    # notebook of this worker (the check above: the same code).
    notebook = _download(reader_site.html, example, ".ipynb", tmp_path)
    assert notebook_problems([notebook], reader.kernel) == []


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_script_is_its_notebooks_code_and_its_preamble_runs(
    reader_site, reader, tmp_path, example
):
    script = _download(reader_site.html, example, ".py", tmp_path)
    notebook = _download(reader_site.html, example, ".ipynb", tmp_path)
    assert script_and_notebook_problems(script, notebook) == []
    # The page's install line is plot_01's, which test_downloads.py runs.
    assert reader_site.install_line(example) == reader_site.install_line(PLOT_01)
    preamble = subprocess.run(
        [reader.python, "-c", script_preamble(script, notebook)],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    # Every program the pages need is here: the preamble says nothing.
    assert (preamble.returncode, preamble.stdout, preamble.stderr) == (0, "", "")


@pytest.mark.parametrize(
    "example",
    RUN_AS_SCRIPTS or [pytest.param(None, marks=pytest.mark.skip(
        reason="no page's code runs differently as a script (RUNS_DIFFERENTLY_AS_A_SCRIPT)"
    ))],
)  # fmt: skip
def test_a_script_that_runs_differently_from_its_notebook_runs_whole(
    reader_site, reader, tmp_path, example
):
    script = _download(reader_site.html, example, ".py", tmp_path)
    assert (
        script_problems(reader.python, [script], prepare=reader_site.install_from_page)
        == []
    )


class _NoWheels(QuietHandler):
    """The site without its wheels: 404 for anything under /wheels/."""

    def send_head(self):  # noqa: ANN201 - http.server's own signature
        if self.path.startswith("/wheels/"):
            self.send_error(404)
            return None
        return super().send_head()


def test_without_the_wheel_on_the_site_the_install_path_fails(
    reader_site, reader, tmp_path
):
    # The negative control: the same site and downloads, served without the wheel by a
    # server of this test's own (the other workers keep using the real one).
    notebook = _download(reader_site.html, PLOT_01, ".ipynb", tmp_path)
    script = _download(reader_site.html, PLOT_01, ".py", tmp_path)
    server = ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(_NoWheels, directory=str(reader_site.html))
    )
    for url in serve(reader_site.html, server):
        notebook.write_text(notebook.read_text().replace(reader_site.base_url, url))
        notebook_found = notebook_problems(
            [notebook], reader.kernel, prepare=reader.uninstall
        )
        script_found = script_problems(
            reader.python, [script],
            prepare=functools.partial(reader_site.install_from_page, served_at=url),
        )  # fmt: skip
    assert len(notebook_found) == 1 and "double_backward" in notebook_found[0], (
        notebook_found
    )
    assert len(script_found) == 1 and "404" in script_found[0], script_found
