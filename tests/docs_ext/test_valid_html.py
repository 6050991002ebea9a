"""valid_html: the size a figure's <img> reserves is its SVG's own, in CSS pixels."""

from __future__ import annotations

import pytest
from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser
from docutils.utils import new_document
from valid_html import _valid_thumbnail_attributes, svg_size

SVG = '<svg xmlns="http://www.w3.org/2000/svg" {attributes}></svg>'


@pytest.mark.parametrize(
    ("attributes", "size"),
    [
        ('width="540pt" height="345.6pt"', (720, 461)),  # matplotlib: 72 pt = 96 px
        ('width="217px" height="304px"', (217, 304)),
        ('width="100" height="50"', (100, 50)),  # user units are CSS pixels
        ('width="1in" height="2.54cm"', (96, 96)),
    ],
)
def test_svg_size_converts_absolute_units_to_css_pixels(tmp_path, attributes, size):
    path = tmp_path / "figure.svg"
    path.write_text(SVG.format(attributes=attributes))
    assert svg_size(path) == size


@pytest.mark.parametrize(
    "attributes",
    ['width="100%" height="100%"', 'viewBox="0 0 10 10"', 'width="10em" height="5em"'],
)
def test_svg_size_is_none_without_an_absolute_width_and_height(tmp_path, attributes):
    path = tmp_path / "figure.svg"
    path.write_text(SVG.format(attributes=attributes))
    assert svg_size(path) is None


def test_a_gallery_with_sections_keeps_one_tag_list_and_its_other_raw_html():
    document = new_document("index", get_default_settings(Parser))
    tag_list = "<div id='sg-tag-list' class='sphx-glr-tag-list'></div>"
    for text in (tag_list, "<div class='sphx-glr-thumbnails'>", tag_list):
        document += nodes.raw(text, text, format="html")
    _valid_thumbnail_attributes(None, document, "index")
    assert [raw.astext() for raw in document.findall(nodes.raw)] == [
        tag_list,
        "<div class='sphx-glr-thumbnails'>",
    ]
