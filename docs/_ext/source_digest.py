"""One digest of the sources a generated part of the site depends on.

conf.py (when to re-run the examples) and error_index.py (when to raise the errors again)
both ask "has the package changed?"; this answers it without importing the package, which
would import torch on every build.
"""

from __future__ import annotations

import hashlib
from importlib.util import find_spec
from pathlib import Path

PACKAGE_DIR = Path(find_spec("double_backward").origin).parent


def digest(*extra_files: Path, salt: str = "") -> str:
    """SHA-256 of the package's Python source and data, ``extra_files`` and ``salt``.

    The data: the committed measurements the "What it costs" page plots.
    """
    hasher = hashlib.sha256(salt.encode())
    package_files = [*PACKAGE_DIR.rglob("*.py"), *PACKAGE_DIR.rglob("*.json")]
    for path in [*sorted(package_files), *extra_files]:
        hasher.update(path.name.encode() + b"\0" + path.read_bytes())
    return hasher.hexdigest()
