"""Check a whole model for double-backward support: :func:`~double_backward.check_model`.

Defined in :mod:`double_backward.checker.model.check`; the report, the breaks and the fixes are
re-exported here, where the API reference documents them.
"""

from __future__ import annotations

from .check import BUILTINS_PAGE, BUILTINS_TABLE, check_model, fix_for
from .check import FIXES as _FIXES
from .report import Break, ModelReport

# Documented here, where the API reference reads it: autodoc takes a name's ``#:`` comment
# from the module it is documented under, and a re-exported dict would show dict's docstring.
#: The fix for each built-in whose double backward raises, keyed by the ATen operator an error
#: names (its ``_backward`` stripped), by the op's OpInfo name, or by ``nn.<module type>``
#: (defined in ``double_backward.checker.shared.fixes``). The built-ins table on the site and
#: :func:`~double_backward.check_model` both read it.
FIXES = _FIXES

__all__ = [
    "BUILTINS_PAGE", "BUILTINS_TABLE", "FIXES", "Break", "ModelReport", "check_model",
    "fix_for",
]  # fmt: skip
