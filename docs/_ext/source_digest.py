"""One digest of the sources a generated part of the site depends on.

conf.py (when to re-run the examples) and error_index.py (when to raise the errors again)
both ask "has the package changed?"; this answers it without importing the package, which
would import torch on every build.
"""

from __future__ import annotations

import hashlib
import subprocess
from importlib.metadata import version
from importlib.util import find_spec
from pathlib import Path

PACKAGE_DIR = Path(find_spec("double_backward").origin).parent
# The packages whose output the pages print: torch's numbers and error messages, NumPy's
# numbers, torchviz's and graphviz's graphs.
PRINTING_PACKAGES = ("torch", "numpy", "torchviz", "graphviz")


def digest(*extra_files: Path, salt: str = "") -> str:
    """SHA-256 of the package's Python source, ``extra_files`` and ``salt``."""
    hasher = hashlib.sha256(salt.encode())
    for path in [*sorted(PACKAGE_DIR.rglob("*.py")), *extra_files]:
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()


def printed_versions() -> str:
    """The versions of what the pages' output comes from: the packages and Graphviz's ``dot``."""
    dot = subprocess.run(["dot", "-V"], capture_output=True, text=True)
    packages = " ".join(f"{name}=={version(name)}" for name in PRINTING_PACKAGES)
    return f"{packages} {dot.stderr.strip() or dot.stdout.strip()}"
