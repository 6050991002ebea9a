"""Render math as MathML at build time: no MathJax, no script, nothing to download.

Browsers render MathML Core natively (Chromium since 109, Firefox, Safari). latex2mathml
converts each formula when the page is written; registered as the HTML math renderer
``mathml`` (``html_math_renderer = "mathml"`` in conf.py).
"""

from __future__ import annotations

from docutils import nodes
from latex2mathml.converter import convert
from sphinx.application import Sphinx


def _visit_math(self, node: nodes.math) -> None:
    self.body.append(convert(node.astext(), display="inline"))
    raise nodes.SkipNode


def _visit_math_block(self, node: nodes.math_block) -> None:
    self.body.append(self.starttag(node, "div", CLASS="math notranslate"))
    self.body.append(convert(node.astext(), display="block"))
    self.body.append("</div>\n")
    raise nodes.SkipNode


def setup(app: Sphinx) -> dict[str, object]:
    app.add_html_math_renderer("mathml", (_visit_math, None), (_visit_math_block, None))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
