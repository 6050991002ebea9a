"""Valid, accessible HTML where Sphinx and sphinx-gallery emit otherwise (found by nox -s site).

- Toctree captions are ``<p role="heading">`` without the ``aria-level`` ARIA 1.2 requires
  (Sphinx issue #14030, fix pending upstream): add level 2, the implicit ARIA 1.1 default.
- sphinx-gallery thumbnails carry a non-standard ``tooltip`` attribute, which the Nu
  validator rejects: make it ``data-tooltip``, which is valid, and ``_static/custom.css``
  shows sphinx-gallery's tooltip from it as sphinx-gallery's stylesheet does from ``tooltip``.
- A gallery with sections gets sphinx-gallery's empty tag list once per section, the same
  ``id`` each time: keep the first.
- Their images have no size, so the gallery shifts as they load (Lighthouse's "unsized
  images"): give each the box sphinx-gallery's stylesheet fits them in (160 x 112), in which
  ``custom.css`` scales the image without distorting it, and load those below the fold lazily.
- The figures of the examples (matplotlib plots, autograd graphs: all SVG) have no size
  either, and load before the first paint, competing with the page's own HTML and CSS on a
  slow link (Lighthouse's first contentful paint on "What it costs"): give each its SVG's own
  size in CSS pixels and load it lazily.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.writers.html5 import HTML5Translator
from sphinx_gallery.directives import depart_imgsg_html, imgsgnode, visit_imgsg_html


class AccessibleHTMLTranslator(HTML5Translator):
    def visit_title(self, node: nodes.title) -> None:
        parent = node.parent
        if isinstance(parent, addnodes.compact_paragraph) and parent.get("toctree"):
            attributes = {"CLASS": "caption", "ROLE": "heading", "aria-level": "2"}
            self.body.append(self.starttag(node, "p", "", **attributes))
            self.body.append('<span class="caption-text">')
            self.context.append("</span></p>\n")
        else:
            super().visit_title(node)


# sphinx-gallery's max-width and max-height of a thumbnail (sg_gallery.css).
THUMBNAIL_BOX = {"width": "160", "height": "112", "loading": "lazy"}


# sphinx-gallery's (empty) tag list, which it writes once per gallery section: an id twice.
TAG_LIST = "<div id='sg-tag-list'"


def _valid_thumbnail_attributes(
    app: Sphinx, doctree: nodes.document, docname: str
) -> None:
    tag_lists = [raw for raw in doctree.findall(nodes.raw) if TAG_LIST in raw.astext()]
    for duplicate in tag_lists[1:]:
        duplicate.parent.remove(duplicate)
    for raw in doctree.findall(nodes.raw):
        text = raw.astext()
        if (
            "html" in raw.get("format", "").split()
            and "sphx-glr-thumbcontainer" in text
        ):
            raw.children = [nodes.Text(text.replace(" tooltip=", " data-tooltip="))]
    for image in doctree.findall(nodes.image):
        if "/images/thumb/sphx_glr_" in image["uri"]:
            image.attributes.update(THUMBNAIL_BOX)
            # A sized image becomes a link to itself in Sphinx: the thumbnail's alt is empty
            # (its title is the link), so that link would have no name.
            image["classes"].append("no-scaled-link")


# CSS pixels per unit of an SVG's width and height (CSS Values 4: 1in = 96px = 72pt).
SVG_UNITS = {"": 1.0, "px": 1.0, "pt": 4 / 3, "in": 96.0, "cm": 96 / 2.54, "mm": 96 / 25.4}


def svg_size(path: Path) -> tuple[int, int] | None:
    """An SVG file's width and height in CSS pixels, or None when it states no absolute size."""
    root = ElementTree.parse(path).getroot()
    size = []
    for dimension in ("width", "height"):
        match = re.fullmatch(r"\s*([0-9.]+)\s*([a-z]*)\s*", root.get(dimension, ""))
        if match is None or match[2] not in SVG_UNITS:
            return None
        size.append(round(float(match[1]) * SVG_UNITS[match[2]]))
    return size[0], size[1]


def visit_sized_lazy_figure(self: HTML5Translator, node: imgsgnode) -> None:
    """sphinx-gallery's ``<img>`` for a figure, with the SVG's size and lazy loading."""
    start = len(self.body)
    visit_imgsg_html(self, node)
    html = "".join(self.body[start:])
    source = Path(self.builder.srcdir) / node["uri"].lstrip("/")
    if not html.startswith("<img ") or source.suffix != ".svg":
        return
    size = svg_size(source)
    attributes = 'loading="lazy" decoding="async"'
    if size is not None:
        attributes += f' width="{size[0]}" height="{size[1]}"'
    self.body[start:] = [html.replace("<img ", f"<img {attributes} ", 1)]


def setup(app: Sphinx) -> dict[str, object]:
    app.add_node(imgsgnode, override=True, html=(visit_sized_lazy_figure, depart_imgsg_html))
    app.set_translator("html", AccessibleHTMLTranslator, override=True)
    app.set_translator("dirhtml", AccessibleHTMLTranslator, override=True)
    app.connect("doctree-resolved", _valid_thumbnail_attributes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
