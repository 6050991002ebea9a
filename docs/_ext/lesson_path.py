"""A "Next" link at the end of every lesson, from one reading order.

The reading order is the gallery's: the sections in ``lesson_sections`` (conf.py, the list
sphinx-gallery's ``subsection_order`` is made from), and in each section its scripts by file
name (``plot_07_...``, then ``plot_07b_...``, then the section's exercise ``plot_07z_...``).
The last lesson of a section links to the next section's first; the very last one to
``lesson_path_after`` (the recipes). A lesson added to a section's folder joins the path with
no list to edit.
"""

from __future__ import annotations

import re
from pathlib import Path

from sphinx.application import Sphinx

GALLERY = "auto_examples"


def section_title(examples: Path, section: str) -> str:
    """The first line of the section's GALLERY_HEADER.rst: its title."""
    return (
        (examples / section / "GALLERY_HEADER.rst").read_text().splitlines()[0].strip()
    )


def reading_order(examples: Path, sections: list[str]) -> list[tuple[str, str]]:
    """(section, docname) of every lesson, in reading order."""
    order = []
    for section in sections:
        folder = examples / section
        if not folder.is_dir():
            raise ValueError(
                f"lesson_sections names {section!r}, but {folder} is no folder"
            )
        # sorted() on names: the order sphinx-gallery's FileNameSortKey gives the cards.
        for script in sorted(folder.glob("plot_*.py"), key=lambda path: path.name):
            order.append((section, f"{GALLERY}/{section}/{script.stem}"))
    return order


def next_link(app: Sphinx, docname: str) -> str | None:
    """The reST of the "Next" paragraph for a lesson, or None for any other page."""
    examples = (
        Path(app.confdir) / app.config.sphinx_gallery_conf["examples_dirs"][0]
    ).resolve()
    order = reading_order(examples, app.config.lesson_sections)
    docnames = [name for _, name in order]
    if docname not in docnames:
        return None
    index = docnames.index(docname)
    if index + 1 == len(order):
        return f"**Next:** :doc:`{app.config.lesson_path_after}`"
    section, following = order[index + 1]
    if section != order[index][0]:
        title = section_title(examples, section)
        return f"**Next section, {title}:** :doc:`/{following}`"
    return f"**Next:** :doc:`/{following}`"


DOWNLOADS = re.compile(r"^\.\. _sphx_glr_download_", re.MULTILINE)


def add_next_link(app: Sphinx, docname: str, source: list[str]) -> None:
    link = next_link(app, docname)
    if link is None:
        return
    block = f"\n.. rst-class:: lesson-next\n\n{link}\n\n"
    text = source[0]
    # Before the download buttons, right after the lesson's last cell.
    match = DOWNLOADS.search(text)
    at = match.start() if match else len(text)
    source[0] = text[:at] + block + text[at:]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_config_value("lesson_sections", [], "env", types=[list])
    app.add_config_value(
        "lesson_path_after", "/auto_examples/index", "env", types=[str]
    )
    app.connect("source-read", add_next_link)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
