"""Give every page a ``<meta name="description">``, taken from its first paragraph.

Search engines (and Lighthouse's SEO audit) want a description per page. A page can set
its own with MyST front matter (``myst: html_meta: description: ...``); any other page gets
the first paragraph of its text, cut at a word boundary.
"""

from __future__ import annotations

from html import escape

from docutils import nodes
from sphinx.application import Sphinx

MAX_LENGTH = 160
SITE_DESCRIPTION = (
    "Learn to write custom PyTorch autograd Functions whose backward can itself be "
    "differentiated, with every claim shown by code run at build time."
)


def _ancestors(node: nodes.Node):
    while node.parent is not None:
        node = node.parent
        yield node


def first_paragraph(doctree: nodes.document) -> str:
    for paragraph in doctree.findall(nodes.paragraph):
        # Skip admonitions, such as sphinx-gallery's "Go to the end to download" note.
        if any(isinstance(node, nodes.Admonition) for node in _ancestors(paragraph)):
            continue
        text = " ".join(paragraph.astext().split())
        if text:
            return text
    return ""


def shorten(text: str, limit: int = MAX_LENGTH) -> str:
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def _add_description(
    app: Sphinx, pagename: str, templatename: str, context: dict, doctree
):
    metatags = context.get("metatags", "")
    if 'name="description"' in metatags:
        return
    text = first_paragraph(doctree) if doctree is not None else ""
    description = shorten(text) if text else SITE_DESCRIPTION
    context["metatags"] = (
        metatags + f'\n<meta name="description" content="{escape(description)}">'
    )


def setup(app: Sphinx) -> dict[str, object]:
    app.connect("html-page-context", _add_description)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
