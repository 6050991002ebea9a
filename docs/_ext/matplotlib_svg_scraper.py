"""sphinx-gallery's matplotlib scraper, writing SVG that is byte-identical from build to build.

matplotlib's SVG carries a creation date and ids drawn from a random salt unless told
otherwise: here the date is left out (``metadata={"Date": None}``) and ``svg.hashsalt`` is
fixed. Text is drawn as paths (``svg.fonttype = "path"``), so no font is needed to view it.
The alt text is the figure's suptitle and axes titles, as sphinx-gallery takes them.
"""

from __future__ import annotations

from typing import Any

import matplotlib
from sphinx_gallery.scrapers import matplotlib_scraper

HASHSALT = "double-backward"


def matplotlib_svg_scraper(
    block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any], **kwargs: Any
) -> str:
    """Save every open matplotlib figure as reproducible SVG and return the reST for them."""
    with matplotlib.rc_context({"svg.hashsalt": HASHSALT, "svg.fonttype": "path"}):
        return matplotlib_scraper(
            block, block_vars, gallery_conf, format="svg", metadata={"Date": None}, **kwargs
        )
