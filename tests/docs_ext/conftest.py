"""The Sphinx helpers in docs/_ext/ are plain modules that conf.py puts on sys.path; so do we."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[2] / "docs" / "_ext"))
