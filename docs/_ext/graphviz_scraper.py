"""A sphinx-gallery image scraper that renders Graphviz graphs to SVG.

Named in ``conf.py`` by its dotted path, ``"graphviz_scraper.graphviz_scraper"``: a
function object in ``sphinx_gallery_conf`` cannot be pickled and makes ``sphinx-build -W`` fail.
After each code block it looks through the example's globals for :class:`graphviz.Digraph` (or
:class:`graphviz.Graph`) objects it has not rendered yet, renders each with the Graphviz ``dot``
program, and returns the reST that embeds them, with their size, so that the page does
not shift while they load.
"""

from __future__ import annotations

import re
import weakref
from pathlib import Path
from typing import Any

import graphviz

__all__ = ["graphviz_scraper"]

# Graphs already embedded. A WeakSet, not a set of id()s: ids are reused once a graph is freed.
_rendered: weakref.WeakSet[graphviz.graphs.BaseGraph] = weakref.WeakSet()


def _alt_text(graph: graphviz.graphs.BaseGraph) -> str:
    return " ".join((graph.comment or graph.name or "Graphviz graph").split())


def _size_in_pixels(svg: bytes) -> tuple[int, int]:
    """The width and height Graphviz gives the SVG (in points), in CSS pixels."""
    root = re.search(rb"<svg[^>]*>", svg)
    sizes = [re.search(rb'\b%s="([\d.]+)pt"' % name, root[0]) if root else None
             for name in (b"width", b"height")]  # fmt: skip
    if not all(sizes):
        raise ValueError(
            "graphviz_scraper: the SVG from dot has no width/height in points"
        )
    return tuple(round(float(size[1]) * 4 / 3) for size in sizes)


def image_rst(svg_path: Path, src_dir: str, alt: str, width: int, height: int) -> str:
    """reST for one graph: width and height given, so the page does not shift as it loads.

    Unitless, so docutils (>= 0.22) writes them as the ``width`` and ``height`` attributes of
    ``<img>``: the browser reserves the space and keeps the aspect ratio when CSS
    (``max-width: 100%; height: auto``) scales the image down. (In ``px`` they would become a
    fixed inline style, which distorts the image on a narrow screen.)
    """
    uri = "/" + svg_path.relative_to(src_dir).as_posix()
    return (
        f"\n\n.. image:: {uri}\n   :alt: {alt}\n   :class: sphx-glr-single-img\n"
        f"   :width: {width}\n   :height: {height}\n\n"
    )


def graphviz_scraper(
    block: Any, block_vars: dict[str, Any], gallery_conf: dict[str, Any]
) -> str:
    """Render the new graphs of one code block to SVG files and return their reST."""
    images = []
    image_paths = iter(block_vars["image_path_iterator"])
    for value in list(block_vars["example_globals"].values()):
        # The same graph can sit under two names (sphinx-gallery keeps a block's last value too).
        if not isinstance(value, graphviz.graphs.BaseGraph) or value in _rendered:
            continue
        _rendered.add(value)
        svg_path = Path(next(image_paths)).with_suffix(".svg")
        svg = value.pipe(format="svg")
        svg_path.write_bytes(svg)
        width, height = _size_in_pixels(svg)
        images.append(
            image_rst(
                svg_path, gallery_conf["src_dir"], _alt_text(value), width, height
            )
        )
    return "".join(images)
