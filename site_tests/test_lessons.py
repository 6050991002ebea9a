"""The lessons' structure, on the built site: sections in reading order, a way in from the
landing page, a Next link on every lesson, a real figure on every card, nothing on a lesson
but the lesson, and tables whose every column a reader can reach at 1280 and 390 px.

Each check returns the problems it finds, so that the negative controls at the end can show
that it finds them on a site broken on purpose.
"""

from __future__ import annotations

import html
import re
import tempfile
from pathlib import Path

import pytest
from sphinx_gallery import gen_rst

from .checks import ROOT, page_url, redirect_pages

EXAMPLES = ROOT / "examples"
GALLERY = "auto_examples"
# The sections in reading order, as docs/conf.py lists them (read from its source, not
# imported: importing conf.py would write inventories and touch the gallery's stamps).
SECTIONS = re.findall(
    r'"(\w+)"', re.search(r"lesson_sections = \[(.*?)\]", (ROOT / "docs" / "conf.py")
                          .read_text(), flags=re.S)[1]
)  # fmt: skip
MAX_LESSON_LINES = 300
# What a reader who downloaded a lesson has none of: the repository's sessions, scripts, data
# files and CI, its environment variables, its issue tracker.
PLUMBING = re.compile(
    r"\bnox\b|\.json\b|benchmarks/|docs/_data|tools/|\.ci/|MALLOC_\w+|DOUBLE_BACKWARD_\w+"
    r"|SOURCE_DATE_EPOCH|READTHEDOCS\w*|\b[Ii]ssues? \d+|dtype not recorded"
)
WIDTHS = (1280, 390)


def section_title(section: str) -> str:
    return (EXAMPLES / section / "GALLERY_HEADER.rst").read_text().splitlines()[0].strip()


def lessons() -> list[tuple[str, Path]]:
    """(section, script) of every lesson, in reading order: sections as listed, scripts by name."""
    return [
        (section, script)
        for section in SECTIONS
        for script in sorted((EXAMPLES / section).glob("plot_*.py"), key=lambda p: p.name)
    ]


def lesson_page(site: Path, section: str, script: Path) -> Path:
    return site / GALLERY / section / f"{script.stem}.html"


def text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def article(page: Path) -> str:
    """The page's article, less the download block (the same on every lesson)."""
    text = page.read_text()
    match = re.search(r"<article[^>]*>(.*)</article>", text, flags=re.S)
    body = match[1] if match else text
    return re.split(r'<div class="sphx-glr-footer', body, maxsplit=1)[0]


# -- the checks ---------------------------------------------------------------------------------


def section_problems(site: Path) -> list[str]:
    index = (site / GALLERY / "index.html").read_text()
    headings = [text_of(h).replace("#", "").replace("¶", "").strip()
                for h in re.findall(r"<h2[^>]*>(.*?)</h2>", index, flags=re.S)]  # fmt: skip
    expected = [section_title(section) for section in [*SECTIONS, "recipes"]]
    problems = [] if headings == expected else [
        f"{GALLERY}/index.html: sections {headings}, expected {expected}"
    ]  # fmt: skip
    for section in SECTIONS:
        scripts = sorted(path.stem for path in (EXAMPLES / section).glob("plot_*.py"))
        if not any(re.search(r"plot_\d\dz_exercise_", name) for name in scripts[-1:]):
            problems.append(f"section {section}: does not end with a plot_NNz_exercise_ page")
    return problems


def start_here_problems(site: Path) -> list[str]:
    index = (site / "index.html").read_text()
    match = re.search(r'class="[^"]*\bstart-here\b[^"]*"[^>]*>.*?href="([^"]+)"', index, re.S)
    first_section, first_script = lessons()[0]
    first = f"{GALLERY}/{first_section}/{first_script.stem}.html"
    if match is None:
        return ["index.html: no start-here link"]
    problems = [] if match[1] == first else [
        f"index.html: start-here links to {match[1]}, not the first lesson {first}"
    ]  # fmt: skip
    before_start = index[: match.start()]
    if "<table" in before_start:
        problems.append("index.html: a table comes before the start-here link")
    return problems


def next_link_problems(site: Path) -> list[str]:
    order = lessons()
    problems = []
    for index, (section, script) in enumerate(order):
        page = lesson_page(site, section, script)
        if index + 1 < len(order):
            next_section, next_script = order[index + 1]
            expected = Path(
                "..", next_section, f"{next_script.stem}.html"
            ).as_posix() if next_section != section else f"{next_script.stem}.html"
        else:
            expected = "../recipes/index.html"
        match = re.search(
            r'<p class="lesson-next">.*?href="([^"]+)"', page.read_text(), flags=re.S
        )
        found = match[1] if match else None
        if found != expected:
            problems.append(f"{page.relative_to(site)}: Next link {found}, expected {expected}")
    return problems


def placeholder_thumbnail() -> bytes:
    """sphinx-gallery's placeholder as its cards show it: no_image.png scaled to a thumbnail."""
    placeholder = Path(gen_rst.__file__).parent / "_static" / "no_image.png"
    with tempfile.TemporaryDirectory() as folder:
        thumb = Path(folder) / "thumb.png"
        gen_rst.scale_image(str(placeholder), str(thumb), 400, 280)
        return thumb.read_bytes()


def thumbnail_problems(site: Path) -> list[str]:
    placeholder = placeholder_thumbnail()
    problems = []
    for index in sorted((site / GALLERY).rglob("index.html")):
        for src in re.findall(
            r'<div class="sphx-glr-thumbcontainer".*?<img [^>]*src="([^"]+)"',
            index.read_text(),
            flags=re.S,
        ):
            image = (index.parent / src).resolve()
            if not image.is_file() or image.read_bytes() == placeholder:
                problems.append(f"{index.relative_to(site)}: {src} is the placeholder image")
    return problems


def plumbing_problems(site: Path) -> list[str]:
    problems = []
    for section, script in lessons():
        page = lesson_page(site, section, script)
        for word in sorted(set(PLUMBING.findall(text_of(article(page))))):
            problems.append(f"{page.relative_to(site)}: {word!r}")
    return problems


def length_problems(examples: Path = EXAMPLES) -> list[str]:
    return [
        f"{script.relative_to(examples)}: {lines} lines (at most {MAX_LESSON_LINES})"
        for section in SECTIONS
        for script in sorted((examples / section).glob("plot_*.py"))
        if (lines := len(script.read_text().splitlines())) > MAX_LESSON_LINES
    ]


# For every table: its width, its box's, and whether the box scrolls; the page's own width.
TABLE_GEOMETRY = """() => ({
  page: document.documentElement.scrollWidth,
  viewport: window.innerWidth,
  tables: [...document.querySelectorAll("article table")].map((table, index) => {
    const box = table.closest(".table-wrapper") || table.parentElement;
    const rect = box.getBoundingClientRect();
    return {index, scroll: box.scrollWidth, client: box.clientWidth, right: rect.right,
            overflow: getComputedStyle(box).overflowX,
            tabindex: box.getAttribute("tabindex")};
  }),
})"""


def table_problems(browser, base_url: str, site: Path, pages: list[Path]) -> list[str]:
    problems = []
    for width in WIDTHS:
        view = browser.new_page(viewport={"width": width, "height": 900})
        for page in pages:
            name = page.relative_to(site).as_posix()
            view.goto(page_url(base_url, site, page), wait_until="load")
            geometry = view.evaluate(TABLE_GEOMETRY)
            if geometry["page"] > geometry["viewport"]:
                problems.append(f"{name} at {width} px: the page scrolls sideways "
                                f"({geometry['page']} px)")  # fmt: skip
            for table in geometry["tables"]:
                where = f"{name} at {width} px: table {table['index'] + 1}"
                hidden = table["scroll"] > table["client"] + 1
                if hidden and width >= 1280:
                    problems.append(f"{where} is {table['scroll']} px wide in a "
                                    f"{table['client']} px column")  # fmt: skip
                elif hidden and (table["overflow"] not in ("auto", "scroll")
                                 or table["right"] > width or table["tabindex"] is None):
                    problems.append(f"{where}: its columns past {table['client']} px "
                                    "cannot be scrolled to, by mouse or keyboard")  # fmt: skip
        view.close()
    return problems


def pages_with_tables(site: Path) -> list[Path]:
    return [
        page for page in sorted(site.rglob("*.html"))
        if "<table" in article(page) and not page.name.startswith("search")
    ]  # fmt: skip


# -- the tests ----------------------------------------------------------------------------------


def test_the_gallery_shows_the_sections_in_reading_order_each_ending_with_an_exercise(site):
    assert section_problems(site) == []


def test_the_landing_page_leads_with_one_start_here_link_to_the_first_lesson(site):
    assert start_here_problems(site) == []


def test_every_lesson_ends_with_a_link_to_the_next_in_reading_order(site):
    assert next_link_problems(site) == []


def test_every_card_shows_a_figure_of_its_page_not_the_placeholder(site):
    assert thumbnail_problems(site) == []


def test_no_lesson_names_build_plumbing(site):
    assert plumbing_problems(site) == []


def test_no_lesson_script_is_over_300_lines():
    assert length_problems() == []


def test_every_table_column_is_reachable_at_1280_and_390_px(site, base_url, browser):
    pages = pages_with_tables(site)
    assert any(page.name == "builtins.html" for page in pages)
    assert table_problems(browser, base_url, site, pages) == []


def test_every_old_lesson_address_leads_to_its_lesson_in_chromium(site, base_url, browser):
    # The lessons that had a flat address before the sections (split pages and exercises,
    # with a letter after their number, are newer).
    moved = {
        script.stem: section for section, script in lessons()
        if re.match(r"plot_\d\d_", script.name)
    }  # fmt: skip
    stubs = {page.stem for page in redirect_pages(site) if page.parent == site / GALLERY}
    assert stubs == set(moved)
    view = browser.new_page()
    arrived = {}
    for stem, section in sorted(moved.items()):
        view.goto(f"{base_url}/{GALLERY}/{stem}.html")
        view.wait_for_url(f"**/{GALLERY}/{section}/{stem}.html")
        arrived[stem] = view.url.removeprefix(base_url + "/")
    view.close()
    assert arrived == {
        stem: f"{GALLERY}/{section}/{stem}.html" for stem, section in moved.items()
    }


# -- negative controls: each check finds what it is for -----------------------------------------


def test_the_checks_find_a_missing_next_link_a_placeholder_and_plumbing(broken_site):
    section, script = lessons()[1]
    page = lesson_page(broken_site, section, script)
    text = page.read_text()
    page.write_text(
        re.sub(r'<p class="lesson-next">.*?</p>', "<p>Run it with nox -s docs.</p>", text,
               count=1, flags=re.S)
    )  # fmt: skip
    assert any(str(page.relative_to(broken_site)) in p for p in next_link_problems(broken_site))
    assert any("'nox'" in p for p in plumbing_problems(broken_site))
    section_index = broken_site / GALLERY / section / "index.html"
    src = re.search(
        rf'<img [^>]*src="([^"]*sphx_glr_{script.stem}_thumb[^"]*)"', section_index.read_text()
    )[1]
    (section_index.parent / src).write_bytes(placeholder_thumbnail())
    assert any(src in p for p in thumbnail_problems(broken_site))


def test_the_length_check_finds_a_long_lesson(tmp_path):
    folder = tmp_path / SECTIONS[0]
    folder.mkdir()
    (folder / "plot_99_long.py").write_text("x = 1\n" * (MAX_LESSON_LINES + 1))
    for section in SECTIONS[1:]:
        (tmp_path / section).mkdir()
    assert length_problems(tmp_path) == [
        f"{SECTIONS[0]}/plot_99_long.py: {MAX_LESSON_LINES + 1} lines (at most 300)"
    ]


@pytest.mark.parametrize("width", ["1600px", "max-content"])
def test_the_table_check_finds_a_table_wider_than_its_column(
    broken_site, broken_base_url, browser, width
):
    page = broken_site / "builtins.html"
    page.write_text(page.read_text().replace(
        "</head>", f"<style>article table {{ min-width: {width}; white-space: nowrap }}</style>"
        "</head>", 1))  # fmt: skip
    problems = table_problems(browser, broken_base_url, broken_site, [page])
    assert any("builtins.html at 1280 px: table" in p for p in problems), problems
