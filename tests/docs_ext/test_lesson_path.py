"""lesson_path: the reading order and the Next link, on a gallery made in a temporary folder."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lesson_path import add_next_link, next_link, reading_order


@pytest.fixture
def app(tmp_path):
    """Two sections; the first has a lesson, one split from it, and its exercise."""
    examples = tmp_path / "examples"
    for section, title, scripts in [
        ("first", "The first section", ["plot_07z_exercise_a.py", "plot_07b_more.py",
                                        "plot_07_main.py"]),
        ("second", "The second section", ["plot_08_next.py"]),
    ]:  # fmt: skip
        (examples / section).mkdir(parents=True)
        (examples / section / "GALLERY_HEADER.rst").write_text(
            f"{title}\n{'=' * len(title)}\n"
        )
        for script in scripts:
            (examples / section / script).write_text('"""Title\n=====\n"""\n')
    (tmp_path / "docs").mkdir()
    config = SimpleNamespace(
        sphinx_gallery_conf={"examples_dirs": ["../examples"]},
        lesson_sections=["first", "second"],
        lesson_path_after="/auto_examples/recipes/index",
    )
    return SimpleNamespace(confdir=str(tmp_path / "docs"), config=config)


def test_the_order_is_the_sections_then_the_file_names_splits_before_the_exercise(
    app, tmp_path
):
    order = reading_order(tmp_path / "examples", ["first", "second"])
    assert [name for _, name in order] == [
        "auto_examples/first/plot_07_main",
        "auto_examples/first/plot_07b_more",
        "auto_examples/first/plot_07z_exercise_a",
        "auto_examples/second/plot_08_next",
    ]


def test_the_next_link_stays_in_the_section_then_names_the_next_section_then_ends(app):
    assert next_link(app, "auto_examples/first/plot_07b_more") == (
        "**Next:** :doc:`/auto_examples/first/plot_07z_exercise_a`"
    )
    assert next_link(app, "auto_examples/first/plot_07z_exercise_a") == (
        "**Next section, The second section:** :doc:`/auto_examples/second/plot_08_next`"
    )
    assert next_link(app, "auto_examples/second/plot_08_next") == (
        "**Next:** :doc:`/auto_examples/recipes/index`"
    )
    assert next_link(app, "index") is None


def test_the_link_goes_before_the_download_buttons(app):
    source = [
        "Lesson text.\n\n.. _sphx_glr_download_auto_examples_first_plot_07_main.py:\n"
    ]
    add_next_link(app, "auto_examples/first/plot_07_main", source)
    text = source[0]
    assert text.index("lesson-next") < text.index(".. _sphx_glr_download_")
    assert ":doc:`/auto_examples/first/plot_07b_more`" in text


def test_a_section_that_is_not_a_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match="lesson_sections names 'missing'"):
        reading_order(tmp_path, ["missing"])
