"""A sphinx-gallery image scraper that renders Graphviz graphs to SVG.

Named in ``conf.py`` by its dotted path, ``"double_backward.scraper.graphviz_scraper"``: a
function object in ``sphinx_gallery_conf`` cannot be pickled and makes ``sphinx-build -W`` fail.
After each code block it looks through the example's globals for :class:`graphviz.Digraph` (or
:class:`graphviz.Graph`) objects it has not rendered yet, renders each with the Graphviz ``dot``
program, and returns the reST that embeds them.
"""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import graphviz
from sphinx_gallery.scrapers import figure_rst

__all__ = ["graphviz_scraper"]

# Graphs already embedded. A WeakSet, not a set of id()s: ids are reused once a graph is freed.
_rendered: weakref.WeakSet[graphviz.graphs.BaseGraph] = weakref.WeakSet()


def _alt_text(graph: graphviz.graphs.BaseGraph) -> str:
    return graph.comment or graph.name or "Graphviz graph"


def graphviz_scraper(
    block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any]
) -> str:
    """Render the new graphs of one code block to SVG files and return their reST."""
    image_rst = []
    image_paths = iter(block_vars["image_path_iterator"])
    for value in list(block_vars["example_globals"].values()):
        # The same graph can sit under two names (sphinx-gallery keeps a block's last value too).
        if not isinstance(value, graphviz.graphs.BaseGraph) or value in _rendered:
            continue
        _rendered.add(value)
        svg_path = Path(next(image_paths)).with_suffix(".svg")
        svg_path.write_bytes(value.pipe(format="svg"))
        image_rst.append(
            figure_rst([svg_path], gallery_conf["src_dir"], _alt_text(value))
        )
    return "".join(image_rst)
