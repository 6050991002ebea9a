"""graphviz_scraper, tested without Sphinx as sphinx-gallery's own scraper tests do."""

from __future__ import annotations

import re

import graphviz
import pytest
from sphinx_gallery.scrapers import ImagePathIterator

from graphviz_scraper import graphviz_scraper


@pytest.fixture
def block_vars(tmp_path):
    return {
        "example_globals": {},
        "image_path_iterator": ImagePathIterator(
            tmp_path / "sphx_glr_plot_demo_{0:03}.png"
        ),
    }


@pytest.fixture
def gallery_conf(tmp_path):
    return {"src_dir": str(tmp_path)}


def small_graph(comment: str) -> graphviz.Digraph:
    graph = graphviz.Digraph(comment=comment)
    graph.edge("x", "out")
    return graph


def test_renders_each_new_graph_to_svg_with_its_comment_as_alt(
    block_vars, gallery_conf, tmp_path
):
    block_vars["example_globals"].update(
        a=small_graph("first graph"), n=3, b=small_graph("second")
    )
    rst = graphviz_scraper(None, block_vars, gallery_conf)
    svgs = sorted(tmp_path.glob("*.svg"))
    assert [p.name for p in svgs] == [
        "sphx_glr_plot_demo_001.svg",
        "sphx_glr_plot_demo_002.svg",
    ]
    assert all(p.read_bytes().lstrip().startswith(b"<?xml") for p in svgs)
    assert b"<svg" in svgs[0].read_bytes()
    assert "sphx_glr_plot_demo_001.svg" in rst and ":alt: first graph" in rst
    assert "sphx_glr_plot_demo_002.svg" in rst and ":alt: second" in rst
    assert not list(tmp_path.glob("*.png"))
    # The size dot gives (points) is passed on in CSS pixels: 4/3 px per point.
    width_pt = re.search(rb'width="([\d.]+)pt"', svgs[0].read_bytes())[1]
    # Unitless, so that docutils writes width/height attributes rather than a fixed style.
    assert f":width: {round(float(width_pt) * 4 / 3)}\n" in rst
    assert re.search(r":height: \d+\n", rst)


def test_a_graph_is_rendered_once_even_if_it_stays_in_globals(
    block_vars, gallery_conf, tmp_path
):
    block_vars["example_globals"]["g"] = small_graph("g")
    assert graphviz_scraper(None, block_vars, gallery_conf)
    assert graphviz_scraper(None, block_vars, gallery_conf) == ""
    block_vars["example_globals"]["h"] = small_graph("h")
    rst = graphviz_scraper(None, block_vars, gallery_conf)
    assert "sphx_glr_plot_demo_002.svg" in rst and "_001" not in rst


def test_no_graph_means_no_image(block_vars, gallery_conf, tmp_path):
    block_vars["example_globals"]["text"] = "not a graph"
    assert graphviz_scraper(None, block_vars, gallery_conf) == ""
    assert not list(tmp_path.iterdir())


def test_svg_bytes_are_identical_for_identical_graphs(
    block_vars, gallery_conf, tmp_path
):
    block_vars["example_globals"]["a"] = small_graph("same")
    graphviz_scraper(None, block_vars, gallery_conf)
    block_vars["example_globals"]["b"] = small_graph("same")
    graphviz_scraper(None, block_vars, gallery_conf)
    first, second = sorted(tmp_path.glob("*.svg"))
    assert first.read_bytes() == second.read_bytes()


def test_a_graph_under_two_names_is_rendered_once(block_vars, gallery_conf, tmp_path):
    graph = small_graph("shared")
    block_vars["example_globals"].update(graph=graph, ___=graph)
    rst = graphviz_scraper(None, block_vars, gallery_conf)
    assert rst.count(".. image::") == 1
    assert len(list(tmp_path.glob("*.svg"))) == 1


def test_an_svg_without_a_size_in_points_is_refused():
    from graphviz_scraper import _size_in_pixels

    with pytest.raises(ValueError, match="no width/height in points"):
        _size_in_pixels(b'<svg width="100%" height="100%"></svg>')
