"""The built site, checked the way its readers meet it. Run by `nox -s site` after `nox -s docs`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .checks import (
    ROOT,
    axe_problems,
    browser_problems,
    html_pages,
    html_validation_problems,
    link_problems,
    notebook_problems,
    page_url,
    script_problems,
    search_results,
    tree_differences,
)

sys.path.insert(0, str(ROOT / "tools"))
from scratch_docs import build_html, copy_sources  # noqa: E402

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
        ("gradgradcheck", "Conclusion: is your backward tracked?"),
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


def test_two_clean_builds_with_source_date_epoch_are_byte_identical(tmp_path):
    env = {**os.environ, "SOURCE_DATE_EPOCH": "1767225600"}
    trees = []
    for name in ("first", "second"):
        tree = copy_sources(tmp_path / name)
        build_html(tree, "html", env=env)
        trees.append(tree / "html")
    assert tree_differences(*trees) == []
    assert list(trees[0].rglob("*.zip")), (
        "the comparison should include the download zips"
    )


def runtime_python() -> Path:
    python = os.environ.get("DOUBLE_BACKWARD_RUNTIME_PYTHON")
    if not python:
        pytest.fail(
            "set DOUBLE_BACKWARD_RUNTIME_PYTHON (nox -s site does) to a venv's python"
        )
    return Path(python)


def test_downloaded_scripts_run_with_only_the_package_and_its_runtime_deps(site):
    python = runtime_python()
    # The venv holds the package but no Sphinx: the scripts must not need it.
    assert (
        subprocess.run([python, "-c", "import double_backward, torchviz"]).returncode
        == 0
    )
    assert (
        subprocess.run([python, "-c", "import sphinx"], capture_output=True).returncode
        != 0
    )
    scripts = sorted(site.glob("_downloads/*/plot_*.py"))
    assert len(scripts) == len(list((ROOT / "examples").glob("plot_*.py")))
    assert script_problems(python, scripts) == []


def test_downloaded_notebooks_execute_cleanly(site, tmp_path):
    notebooks = [
        Path(shutil.copy(path, tmp_path))
        for path in sorted(site.glob("_downloads/*/*.ipynb"))
    ]
    assert len(notebooks) == len(list((ROOT / "examples").glob("plot_*.py")))
    assert notebook_problems(notebooks) == []
