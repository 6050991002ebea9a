"""Custom ``torch.autograd.Function``\\ s whose backward can itself be differentiated.

One module per case of PyTorch's "Double Backward with Custom Functions" tutorial:

- :mod:`double_backward.saving_inputs`: :class:`Square`
- :mod:`double_backward.saving_outputs`: :class:`Exp`
- :mod:`double_backward.saving_intermediates`: :class:`Sinh`, :func:`sinh`, :class:`SinhBad`
- :mod:`double_backward.untracked_backward`: :class:`Cube`, :class:`CubeBackward`

and :func:`check`, which tells whether your own Function supports double backward.

The names are imported on first use, so that ``double_backward.scraper`` (which Sphinx
loads on every build) does not pay for importing torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module that defines it.
_EXPORTS = {
    "Square": "saving_inputs",
    "Exp": "saving_outputs",
    "Sinh": "saving_intermediates",
    "SinhBad": "saving_intermediates",
    "sinh": "saving_intermediates",
    "Cube": "untracked_backward",
    "CubeBackward": "untracked_backward",
    "check": "checker",
}
__all__ = ["Cube", "CubeBackward", "Exp", "Sinh", "SinhBad", "Square", "check", "sinh"]

if TYPE_CHECKING:
    from .checker import check
    from .saving_inputs import Square
    from .saving_intermediates import Sinh, SinhBad, sinh
    from .saving_outputs import Exp
    from .untracked_backward import Cube, CubeBackward


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'double_backward' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
