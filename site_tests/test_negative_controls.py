"""Each site check, run on a deliberately broken copy of the site, must report the breakage."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat

from .checks import (
    RUNS_DIFFERENTLY_AS_A_SCRIPT,
    download_problems,
    html_validation_problems,
    live_timing_problems,
    notebook_problems,
    page_problems,
    script_and_notebook_problems,
    script_problems,
    search_results,
    tree_differences,
)
from .links import link_problems

EXAMPLE_PAGE = "auto_examples/tutorial/plot_01_saving_inputs.html"


def inject(page: Path, html: str) -> None:
    """Insert ``html`` just before ``</body>``."""
    text = page.read_text()
    assert "</body>" in text
    page.write_text(text.replace("</body>", f"{html}</body>", 1))


def test_browser_check_catches_a_deleted_svg(broken_site, broken_base_url, browser):
    page = broken_site / EXAMPLE_PAGE
    text = page.read_text()
    svg = next(
        name for name in text.split('"') if "_images/" in name and name.endswith(".svg")
    )
    (page.parent / svg).resolve().unlink()
    problems = page_problems(browser, [f"{broken_base_url}/{EXAMPLE_PAGE}"])
    assert any(" 404 " in p and p.endswith(".svg") for p in problems), problems
    assert any("image did not decode" in p for p in problems), problems


def test_browser_check_catches_a_figure_sized_out_of_proportion(
    broken_site, broken_base_url, browser
):
    costs_page = "auto_examples/costs/plot_20_costs.html"
    page = broken_site / costs_page
    text = page.read_text()
    assert '<img loading="lazy" decoding="async" width="720" height="461"' in text
    page.write_text(text.replace('width="720" height="461"', 'width="720" height="720"', 1))
    problems = page_problems(browser, [f"{broken_base_url}/{costs_page}"])
    assert any("image sized 720x720, drawn 720x461" in p for p in problems), problems


def test_browser_check_catches_a_script_error(broken_site, broken_base_url, browser):
    inject(
        broken_site / "index.html",
        "<script>throw new Error('injected failure')</script>",
    )
    problems = page_problems(browser, [f"{broken_base_url}/index.html"])
    assert any("page error" in p and "injected failure" in p for p in problems), (
        problems
    )


def test_browser_check_catches_and_blocks_an_external_script(
    broken_site, broken_base_url, browser
):
    # A reserved, never-resolving name; the check aborts the request before it is sent.
    inject(
        broken_site / "index.html",
        '<script src="https://cdn.example.invalid/x.js"></script>',
    )
    problems = page_problems(browser, [f"{broken_base_url}/index.html"])
    assert any("request to another host (blocked)" in p for p in problems), problems


def test_search_check_catches_an_empty_search_index(
    broken_site, broken_base_url, browser
):
    index = broken_site / "searchindex.js"
    index.write_text(
        'Search.setIndex({"docnames": [], "filenames": [], "titles": [], '
        '"terms": {}, "titleterms": {}, "objects": {}, "objnames": {}, '
        '"objtypes": {}, "envversion": {}, "alltitles": {}, "indexentries": {}})'
    )
    assert search_results(browser, broken_base_url, "save_for_backward") == []


def test_accessibility_check_catches_an_image_without_alt(
    broken_site, broken_base_url, browser
):
    inject(broken_site / "index.html", '<img src="_static/favicon.svg">')
    problems = page_problems(browser, [f"{broken_base_url}/index.html"])
    assert any("image-alt" in p for p in problems), problems


def test_link_check_catches_a_broken_anchor_on_another_page(broken_site):
    inject(broken_site / "index.html", '<a href="api.html#no-such-anchor">broken</a>')
    problems = link_problems(broken_site)
    assert problems == [
        f"index.html:{_last_line(broken_site / 'index.html')}: api.html#no-such-anchor: "
        "no id 'no-such-anchor' on api.html"
    ], problems


def test_link_check_catches_a_broken_anchor_on_the_same_page_of_an_orphan(broken_site):
    # A page no other page links to is checked too: every file is read, nothing is crawled.
    orphan = broken_site / "auto_examples" / "orphan.html"
    orphan.write_text('<html><body><a href="#nowhere">top</a></body></html>')
    problems = link_problems(broken_site)
    assert problems == ["auto_examples/orphan.html:1: #nowhere: no id 'nowhere' on "
                        "auto_examples/orphan.html"], problems  # fmt: skip


def test_link_check_catches_a_missing_file_and_a_link_out_of_the_site(broken_site):
    (broken_site / "api.html").unlink()  # every page's navigation links to it
    inject(broken_site / "index.html", '<img alt="x" src="../outside.png">')
    problems = link_problems(broken_site)
    assert any(p.endswith("api.html: no such file") for p in problems), problems
    assert any(
        p.endswith("../outside.png: points outside the site") for p in problems
    ), problems


def test_link_check_reports_a_page_that_is_not_utf8_instead_of_stopping(broken_site):
    (broken_site / "latin1.html").write_bytes('<p id="café">café</p>'.encode("latin-1"))
    problems = link_problems(broken_site)
    assert len(problems) == 1 and problems[0].startswith("latin1.html: not UTF-8: "), problems


def _last_line(page: Path) -> int:
    """The line of the page that holds ``</body>`` (where inject puts its HTML)."""
    lines = page.read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if "</body>" in line)


def test_html_check_catches_a_duplicate_id(site, tmp_path):
    # One page, the index, broken: the validator reads each page alone, and validating every
    # page of a copy of the site took 10 s more (the whole site validates clean in test_site).
    broken = tmp_path / "one-page"
    broken.mkdir()
    shutil.copy(site / "index.html", broken / "index.html")
    inject(broken / "index.html", '<span id="twice"></span><span id="twice"></span>')
    problems = html_validation_problems(broken)
    assert any("Duplicate ID" in p and "twice" in p for p in problems), problems


def test_reproducibility_check_catches_a_changed_file(broken_site, site):
    (broken_site / "index.html").write_text("changed")
    assert tree_differences(site, broken_site) == ["differs: index.html"]


def test_live_timing_check_catches_a_page_that_times_at_build_time(tmp_path):
    (tmp_path / "plot_99_timed.py").write_text(
        "import timeit\n"
        "# time.perf_counter() in a comment is fine\n"
        "ratio = timeit.timeit(lambda: None) / 1e-7\n"
        "started = time.perf_counter()\n"
    )
    problems = live_timing_problems(tmp_path)
    assert [p.split(":")[1] for p in problems] == ["1", "3", "4"], problems


def test_script_check_catches_a_failing_script(tmp_path):
    script = tmp_path / "plot_broken.py"
    script.write_text("raise RuntimeError('broken example')\n")
    problems = script_problems(Path(shutil.which("python")), [script])
    assert len(problems) == 1 and "broken example" in problems[0]


def test_notebook_check_catches_a_failing_cell(tmp_path):
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 / 0")])
    path = tmp_path / "broken.ipynb"
    nbformat.write(notebook, path)
    problems = notebook_problems([path])
    assert len(problems) == 1 and "ZeroDivisionError" in problems[0]


def test_download_check_catches_rest_left_in_a_notebook(broken_site):
    path = next(broken_site.glob("_downloads/*/plot_03_saving_intermediates.ipynb"))
    notebook = json.loads(path.read_text())
    markdown = next(c for c in notebook["cells"] if c["cell_type"] == "markdown")
    markdown["source"] = [
        ".. literalinclude:: /../src/double_backward/functions/saving_intermediates.py\n"
        "   :pyobject: Sinh\n\nSee :class:`~double_backward.Sinh`.\n"
    ]
    path.write_text(json.dumps(notebook))
    problems = download_problems(broken_site)
    assert any("'literalinclude'" in p for p in problems), problems
    assert any("':class:`'" in p for p in problems), problems
    assert any("'.. literalinclude::'" in p for p in problems), problems


def test_download_check_catches_a_script_without_the_function_its_page_shows(broken_site):
    path = next(broken_site.glob("_downloads/*/plot_03_saving_intermediates.py"))
    text = path.read_text()
    # The listing is code the reader can edit, not a comment.
    assert "\nclass SinhBad(torch.autograd.Function):" in text
    path.write_text(text.replace("\nclass SinhBad(", "\nclass Renamed("))
    problems = download_problems(broken_site)
    assert problems == [
        "plot_03_saving_intermediates.py: lacks code its page shows: "
        "'class SinhBad(torch.autograd.Function):'"
    ]


def test_script_and_notebook_check_catches_a_script_that_is_not_its_notebooks_code(
    broken_site,
):
    script = next(broken_site.glob("_downloads/*/plot_03_saving_intermediates.py"))
    notebook = next(broken_site.glob("_downloads/*/plot_03_saving_intermediates.ipynb"))
    assert script_and_notebook_problems(script, notebook) == []
    text = script.read_text()
    third_cell = "".join(
        [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"][2][
            "source"
        ]
    )
    script.write_text(text.replace(third_cell, third_cell + "\nprint('script only')", 1))
    problems = script_and_notebook_problems(script, notebook)
    assert problems == [
        "plot_03_saving_intermediates.py: code the notebook does not have: "
        "\"print('script only')\""
    ], problems
    script.write_text(text.replace(third_cell, "", 1))
    problems = script_and_notebook_problems(script, notebook)
    assert len(problems) == 1 and "lacks the notebook's code cell 3" in problems[0], problems


def test_a_page_that_starts_processes_has_its_script_run_whole():
    # The selection of scripts run whole, besides their notebooks (test_site.py).
    assert RUNS_DIFFERENTLY_AS_A_SCRIPT.search("torch.multiprocessing.spawn(run, nprocs=2)")
    assert RUNS_DIFFERENTLY_AS_A_SCRIPT.search("mp.start_processes(run, nprocs=2)")
    assert RUNS_DIFFERENTLY_AS_A_SCRIPT.search("here = Path(__file__).parent")
    assert not RUNS_DIFFERENTLY_AS_A_SCRIPT.search("grad_x = torch.autograd.grad(y, x)")
