"""The ImportError raised when a module needs one of the package's extras and it is missing.

The package requires torch and NumPy only. Drawing graphs (``graphs``), building the C++
example (``cpp``) and the pages' plots (``plots``) need more; ``pages`` is all of them, and the
site's install line installs it. ``EXTRAS`` mirrors ``[project.optional-dependencies]`` of
``pyproject.toml`` (a test keeps the two equal).
"""

from __future__ import annotations

import sys

EXTRAS: dict[str, tuple[str, ...]] = {
    "graphs": ("torchviz==0.0.3", "graphviz>=0.20"),
    "plots": ("matplotlib>=3.8",),
    "cpp": ("ninja>=1.11",),
}
# torchviz 0.0.3 and torch.utils.cpp_extension import setuptools (distutils), which Python 3.12
# no longer ships in a venv.
if sys.version_info >= (3, 12):
    EXTRAS = {
        name: (*requirements, "setuptools")
        if name in ("graphs", "cpp")
        else requirements
        for name, requirements in EXTRAS.items()
    }


def missing_extra(what: str, extra: str, error: ImportError) -> ImportError:
    """The error to raise, ``from error``, when ``what`` cannot import a module of ``extra``."""
    requirements = " ".join(f'"{requirement}"' for requirement in EXTRAS[extra])
    return ImportError(
        f"{what} needs {error.name or 'a module'}, which is not installed: it comes with the "
        f'"{extra}" extra of double-backward. Install the package with it, from the wheel '
        f"you installed it from (the site's install line installs every extra, [pages]):\n"
        f'    pip install "double-backward[{extra}] @ <the wheel\'s URL or path>"\n'
        f"or install what the extra holds:\n"
        f"    pip install {requirements}"
    )
