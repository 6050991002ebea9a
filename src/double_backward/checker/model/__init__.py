"""Check a whole model for double-backward support: :func:`~double_backward.check_model`.

Defined in :mod:`double_backward.checker.model.check`; the report, the breaks and the fixes are
re-exported here, where the API reference documents them.
"""

from __future__ import annotations

from .check import BUILTINS_PAGE, BUILTINS_TABLE, FIXES, check_model, fix_for
from .report import Break, ModelReport

__all__ = [
    "BUILTINS_PAGE", "BUILTINS_TABLE", "FIXES", "Break", "ModelReport", "check_model",
    "fix_for",
]  # fmt: skip
