"""One digest of the sources a generated part of the site depends on.

conf.py (when to re-run the examples) and error_index.py (when to raise the errors again)
both ask "has the package changed?"; this answers it without importing the package, which
would import torch on every build.
"""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

PACKAGE_DIR = Path(find_spec("double_backward").origin).parent
# The packages whose output the pages print: torch's numbers and error messages, NumPy's
# numbers, torchviz's and graphviz's graphs.
PRINTING_PACKAGES = ("torch", "numpy", "torchviz", "graphviz")


def digest(*extra_files: Path, salt: str = "") -> str:
    """SHA-256 of the package's Python and C++ source and data, ``extra_files`` and ``salt``.

    The data: the committed measurements the "What it costs" page plots.
    """
    hasher = hashlib.sha256(salt.encode())
    package_files = [
        *PACKAGE_DIR.rglob("*.py"), *PACKAGE_DIR.rglob("*.cpp"), *PACKAGE_DIR.rglob("*.json")
    ]
    for path in [*sorted(package_files), *extra_files]:
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def regenerate(path: Path, key: str, make: Callable[[], str]) -> bool:
    """Write ``make()`` to ``path`` unless ``path`` was last made with the same ``key``.

    The key is kept beside the file (``path`` with the suffix ``.key``). The file is rewritten
    only when its content changes, so that Sphinx does not re-read the pages including it.
    Returns whether ``make`` ran.
    """
    key_path = path.with_suffix(".key")
    if path.exists() and key_path.exists() and key_path.read_text() == key:
        return False
    path.parent.mkdir(exist_ok=True)
    content = make()
    if not path.exists() or path.read_text() != content:
        path.write_text(content)
    key_path.write_text(key)
    return True


def printed_versions() -> str:
    """The versions of what the pages' output comes from: the packages and Graphviz's ``dot``."""
    dot = subprocess.run(["dot", "-V"], capture_output=True, text=True)
    packages = " ".join(f"{name}=={version(name)}" for name in PRINTING_PACKAGES)
    return f"{packages} {dot.stderr.strip() or dot.stdout.strip()}"
