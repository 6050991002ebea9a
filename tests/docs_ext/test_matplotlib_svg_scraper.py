"""matplotlib_svg_scraper, tested without Sphinx as sphinx-gallery's own scraper tests do."""

from __future__ import annotations

import matplotlib

matplotlib.use("agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib_svg_scraper import matplotlib_svg_scraper  # noqa: E402
from sphinx_gallery.scrapers import ImagePathIterator  # noqa: E402


def scrape(folder):
    folder.mkdir()
    fig, ax = plt.subplots()
    fig.suptitle("Ratio against size")
    ax.loglog([1e3, 1e6], [1.2, 0.8], label="Square")
    ax.legend()
    block_vars = {
        "example_globals": {},
        "image_path_iterator": ImagePathIterator(folder / "sphx_glr_plot_demo_{0:03}.png"),
    }
    gallery_conf = {
        "src_dir": str(folder),
        "image_srcset": [],
        "matplotlib_animations": (False, None),
        "compress_images": (),
    }
    return matplotlib_svg_scraper(None, block_vars, gallery_conf)


def test_writes_svg_with_the_title_as_alt_text_and_closes_the_figure(tmp_path):
    rst = scrape(tmp_path / "a")
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["sphx_glr_plot_demo_001.svg"]
    assert ":alt: Ratio against size" in rst
    assert plt.get_fignums() == []


def test_two_renderings_are_byte_identical_and_undated(tmp_path):
    scrape(tmp_path / "a")
    scrape(tmp_path / "b")
    first = (tmp_path / "a" / "sphx_glr_plot_demo_001.svg").read_bytes()
    assert first == (tmp_path / "b" / "sphx_glr_plot_demo_001.svg").read_bytes()
    assert b"<dc:date>" not in first
    # Without a fixed salt, matplotlib draws the clip-path ids at random.
    assert matplotlib.rcParams["svg.hashsalt"] is None
