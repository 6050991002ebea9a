"""Sphinx configuration for the double-backward site."""

from __future__ import annotations

import datetime
import os
import re
import sys
import time
from importlib.metadata import version as installed_version
from pathlib import Path

DOCS = Path(__file__).parent
EXTENSIONS_DIR = DOCS / "_ext"
sys.path.insert(0, str(EXTENSIONS_DIR))  # the Sphinx extensions and build helpers

from offline_inventory import write_inventories  # noqa: E402
from source_digest import digest, printed_versions  # noqa: E402
from sphinx_gallery.sorting import ExplicitOrder  # noqa: E402

# -- Project -------------------------------------------------------------------
project = "double-backward"
author = "The double-backward developers"
# From the project's first year to the year of the build: SOURCE_DATE_EPOCH's when it is set
# (reproducible builds), else today's.
FIRST_YEAR = 2026
_build_year = datetime.datetime.fromtimestamp(
    int(os.environ.get("SOURCE_DATE_EPOCH", time.time())), tz=datetime.timezone.utc
).year
_years = f"{FIRST_YEAR}" if _build_year <= FIRST_YEAR else f"{FIRST_YEAR}–{_build_year}"
copyright = f"{_years}, The double-backward developers"
release = version = installed_version("double-backward")

# -- General -------------------------------------------------------------------
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "mathml",  # in _ext/: math rendered to MathML at build time, no MathJax
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
    "complete_downloads",  # in _ext/: scripts, notebooks and zips with the code they show
    "package_wheel",  # in _ext/: the package's wheel, served by the site, and its install line
    "valid_html",  # in _ext/: ARIA and validity fixes to generated HTML
    "code_links",  # in _ext/: no links from variables to the built-in type they hold
    "page_descriptions",  # in _ext/: a meta description on every page
    "error_index",  # in _ext/: the error table, from messages raised at build time
    "compatibility_matrix",  # in _ext/: every Function under every transform, run at build time
    "builtins_table",  # in _ext/: built-ins whose double backward raises, per torch release
    "lesson_path",  # in _ext/: a "Next" link at the end of every lesson, in reading order
    "sphinx_reredirects",  # the pages' addresses from before the sections still work
    "cost_tables",  # in _ext/: the measured costs' reference tables, from the committed runs
]
exclude_patterns = [
    "_build",
    "_generated",
    "auto_examples/*.ipynb",
    "auto_examples/*.py",
    "**.zip",
]
nitpicky = True
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "dollarmath"]
html_math_renderer = "mathml"

# -- Cross-references, offline ---------------------------------------------------
# Inventories are written locally from offline_inventory.py; nothing is fetched at build time.
intersphinx_mapping = write_inventories(DOCS / "_build" / "inventories")

# -- Autodoc -------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# forward/backward would otherwise inherit torch.autograd.Function's long docstrings.
autodoc_inherit_docstrings = False
# A class's signature (for dataclasses, every field and its default) is left out.
autodoc_class_signature = "separated"
autodoc_default_options = {"show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False


# -- Gallery ---------------------------------------------------------------------
def _rerun_examples_if_changed(key: str, gallery_dir: Path) -> None:
    """Make sphinx-gallery re-run every example when what their output depends on changed.

    sphinx-gallery skips an example whose own file is unchanged (it keeps an .md5 beside
    the output), but the output also depends on double_backward, this configuration, the
    scraper and torch's version: when their hash differs from the last build's, drop
    those .md5 files. Drop the generated .rst files as well: a graph can change while its
    page's text does not, and Sphinx only re-copies the images of pages it rewrites.
    """
    stamp = gallery_dir / ".inputs-sha256"
    if stamp.exists() and stamp.read_text() == key:
        return
    for generated in [*gallery_dir.rglob("*.md5"), *gallery_dir.rglob("plot_*.rst")]:
        generated.unlink()
    gallery_dir.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key)


# The examples' output depends on the package, this file, the build helpers (the scraper) and
# the versions of torch and the other packages whose output the pages print.
_rerun_examples_if_changed(
    digest(Path(__file__), *sorted(EXTENSIONS_DIR.glob("*.py")), salt=printed_versions()),
    DOCS / "auto_examples",
)

# The lessons' sections: examples/<section>/, in reading order. The gallery shows them in this
# order, then the recipes; lesson_path.py links each lesson to the next from the same list.
lesson_sections = [
    "tutorial",
    "writing",
    "when_it_breaks",
    "builtins_and_models",
    "beyond_python",
    "costs",
]
lesson_path_after = "/auto_examples/recipes/index"

sphinx_gallery_conf = {
    "examples_dirs": ["../examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",  # execute every plot_*.py script
    "subsection_order": ExplicitOrder(
        [f"../examples/{section}" for section in lesson_sections] + ["../examples/recipes"]
    ),
    "within_subsection_order": "FileNameSortKey",  # plot_01_..., plot_02_...: reading order
    "image_scrapers": (
        "graphviz_scraper.graphviz_scraper",  # docs/_ext/graphviz_scraper.py
        "matplotlib_svg_scraper.matplotlib_svg_scraper",  # SVG, same bytes every build
    ),
    # matplotlib's rcParams back to defaults before each example, so no page restyles the next.
    "reset_modules": ("matplotlib",),
    # The examples run in worker processes, one per CPU (sphinx-gallery's `parallel`, with
    # joblib); the pages are the same bytes as a serial build's (site_tests check two builds).
    # An example that starts processes of its own (torch.multiprocessing.spawn) sets
    # `# sphinx_gallery_parallel = False`: a worker's start method is joblib's "loky", which the
    # spawned children cannot set up, so such an example runs first, alone, in Sphinx's process.
    "parallel": os.cpu_count() or 1,
    # A graph on a cell's last line would otherwise print as "<graphviz...Digraph object at 0x...>".
    "capture_repr": (),
    "abort_on_example_error": True,  # an example that raises fails the build
    "doc_module": ("double_backward",),
    "backreferences_dir": "gen_modules/backreferences",
    "inspect_global_variables": True,
    "remove_config_comments": True,
    # The notebooks' first cell installs the package from this site: see package_wheel.py.
    # Stable output: no per-example timing line, no computation-times page.
    "min_reported_time": float("inf"),
    "write_computation_times": False,
    "show_memory": False,
    "show_signature": False,
    # Only the gallery's own stylesheet: no binder, dataframe or rich-output styles to load.
    "css": ("sg_gallery",),
}

# -- HTML --------------------------------------------------------------------------
html_theme = "furo"
html_title = "double-backward"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
html_js_files = ["focusable-code.js"]
html_favicon = "_static/favicon.svg"
html_extra_path = ["robots.txt"]
html_last_updated_fmt = None
html_show_sourcelink = False
# No general index or module index pages: search covers them, and each rebuild skips them.
html_use_index = False
html_domain_indices = False
html_copy_source = False
html_theme_options = {"navigation_with_keys": True}
# The site's absolute address: the notebooks and pages install the package's wheel from it
# (package_wheel.py). Read the Docs sets it; elsewhere pass -D html_baseurl=https://.../
html_baseurl = os.environ.get("READTHEDOCS_CANONICAL_URL", "")
# -- Moved pages -------------------------------------------------------------------
# The lessons were one flat gallery (auto_examples/plot_NN_....html) before the sections: each
# old address is a page that sends the reader on to the lesson's new one.
redirects = {
    f"auto_examples/{script.stem}": f"{script.parent.name}/{script.stem}.html"
    for section in lesson_sections
    for script in sorted((DOCS.parent / "examples" / section).glob("plot_*.py"))
    if not re.match(r"plot_\d\d[a-z]_", script.name)  # pages added since had no old address
}
redirect_html_template_file = "_templates/redirect.html"

copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True
