"""Valid, accessible HTML where Sphinx and sphinx-gallery emit otherwise (found by nox -s site).

- Toctree captions are ``<p role="heading">`` without the ``aria-level`` ARIA 1.2 requires
  (Sphinx issue #14030, fix pending upstream): add level 2, the implicit ARIA 1.1 default.
- sphinx-gallery thumbnails carry a non-standard ``tooltip`` attribute, which the Nu
  validator rejects: make it ``data-tooltip``, which is valid, and ``_static/custom.css``
  shows sphinx-gallery's tooltip from it as sphinx-gallery's stylesheet does from ``tooltip``.
- Their images have no size, so the gallery shifts as they load (Lighthouse's "unsized
  images"): give each the box sphinx-gallery's stylesheet fits them in (160 x 112), in which
  ``custom.css`` scales the image without distorting it, and load those below the fold lazily.
"""

from __future__ import annotations

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.writers.html5 import HTML5Translator


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


def _valid_thumbnail_attributes(
    app: Sphinx, doctree: nodes.document, docname: str
) -> None:
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


def setup(app: Sphinx) -> dict[str, object]:
    app.set_translator("html", AccessibleHTMLTranslator, override=True)
    app.set_translator("dirhtml", AccessibleHTMLTranslator, override=True)
    app.connect("doctree-resolved", _valid_thumbnail_attributes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
