"""The built site, checked the way its readers meet it. Run by `nox -s site` after `nox -s docs`."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pytest

from .checks import (
    ROOT,
    axe_problems,
    browser_problems,
    download_problems,
    html_pages,
    html_validation_problems,
    link_problems,
    live_timing_problems,
    notebook_problems,
    page_url,
    script_problems,
    search_results,
    tree_differences,
)

ARTIFACTS = ROOT / "site-artifacts"
EXAMPLE_PAGE = "auto_examples/plot_03_saving_intermediates.html"


def all_urls(site: Path, base_url: str) -> list[str]:
    return [page_url(base_url, site, page) for page in html_pages(site)]


def test_the_site_has_the_pages_the_checks_expect(site):
    names = {page.relative_to(site).as_posix() for page in html_pages(site)}
    assert {"index.html", "api.html", "search.html", EXAMPLE_PAGE} <= names


def test_every_page_loads_in_chromium_without_errors_or_outside_requests(
    site, base_url, browser
):
    assert browser_problems(browser, all_urls(site, base_url)) == []


@pytest.mark.parametrize(
    ("query", "expected_title"),
    [
        ("save_for_backward", "Saving the inputs"),
        ("gradgradcheck", "The four cases compared: is your backward tracked?"),
    ],
)
def test_search_finds_the_pages_that_teach_a_name(
    base_url, browser, query, expected_title
):
    assert expected_title in search_results(browser, base_url, query)


def test_search_finds_nothing_for_a_nonsense_word(base_url, browser):
    assert search_results(browser, base_url, "zqxjvkwplorbt") == []


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


def test_no_serious_or_critical_accessibility_violations(site, base_url, browser):
    assert axe_problems(browser, all_urls(site, base_url)) == []


def test_every_internal_link_and_anchor_resolves(site, base_url):
    assert link_problems(base_url, all_urls(site, base_url)) == []


def test_the_nu_validator_reports_no_errors(site):
    assert html_validation_problems(site) == []


def test_two_clean_builds_with_source_date_epoch_are_byte_identical(reader_site):
    # The second build starts from an empty C++ build cache (see conftest.reader_site).
    first, second = reader_site.html, reader_site.second_html
    examples = {
        f"{script.stem}.html" for script in (ROOT / "examples").glob("plot_*.py")
    }
    for tree in (first, second):
        assert {
            page.name for page in (tree / "auto_examples").glob("plot_*.html")
        } == examples
    assert tree_differences(first, second) == []
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
    (problem,) = notebook_problems([notebook], reader.kernel)
    assert "built without the address of its site" in problem, problem


def test_every_notebook_runs_whole_from_the_served_site_in_a_venv_without_the_package(
    reader_site, reader, tmp_path
):
    notebooks = [Path(shutil.copy(path, tmp_path))
                 for path in sorted(reader_site.html.glob("_downloads/*/*.ipynb"))]  # fmt: skip
    assert len(notebooks) == len(list((ROOT / "examples").glob("plot_*.py")))
    assert notebook_problems(notebooks, reader.kernel, prepare=reader.uninstall) == []


def test_every_script_runs_after_its_pages_install_line_in_a_venv_without_the_package(
    reader_site, reader, tmp_path
):
    scripts = [Path(shutil.copy(path, tmp_path))
               for path in sorted(reader_site.html.glob("_downloads/*/plot_*.py"))]  # fmt: skip
    assert len(scripts) == len(list((ROOT / "examples").glob("plot_*.py")))
    assert (
        script_problems(reader.python, scripts, prepare=reader_site.install_from_page)
        == []
    )


def test_without_the_wheel_on_the_site_the_install_path_fails(
    reader_site, reader, tmp_path
):
    # The negative control: the same site and downloads, with the wheel taken away.
    wheels, aside = reader_site.html / "wheels", tmp_path / "wheels-aside"
    shutil.move(wheels, aside)
    try:
        notebook = Path(shutil.copy(
            next(reader_site.html.glob("_downloads/*/plot_01_*.ipynb")), tmp_path
        ))  # fmt: skip
        script = Path(shutil.copy(
            next(reader_site.html.glob("_downloads/*/plot_01_*.py")), tmp_path
        ))  # fmt: skip
        notebook_found = notebook_problems(
            [notebook], reader.kernel, prepare=reader.uninstall
        )
        script_found = script_problems(
            reader.python, [script], prepare=reader_site.install_from_page
        )
    finally:
        shutil.move(aside, wheels)
    assert len(notebook_found) == 1 and "double_backward" in notebook_found[0], (
        notebook_found
    )
    assert len(script_found) == 1 and "404" in script_found[0], script_found
