"""Custom ``torch.autograd.Function``\\ s whose backward can itself be differentiated.

The package is grouped by role:

- :mod:`double_backward.functions`: what the pages teach, one module per case of PyTorch's
  "Double Backward with Custom Functions" tutorial (:class:`Square`, :class:`Exp`,
  :class:`Sinh`, :func:`sinh`, :class:`SinhBad`, :class:`Cube`, :class:`CubeBackward`), the
  same cases in the modern API, higher orders, and the failures, broken on purpose;
- :mod:`double_backward.checker`: :func:`check`, which tells whether your own Function
  supports double backward (torch and NumPy only);
- :mod:`double_backward.checker.model`: :func:`check_model`, the same question for a whole
  model, answered with the submodule and the op that break it;
- :mod:`double_backward.graph`: drawing autograd graphs with torchviz, for the pages;
- :mod:`double_backward.ops`: replacements for built-ins that have no double backward
  (``scaled_dot_product_attention``, ``cdist``, ``pdist``, ``ctc_loss``).

The names are imported on first use, so that importing one module (the checker, say) does not
import the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Submodules reachable as attributes after ``import double_backward``.
_SUBMODULES = ("ops",)

# Public name -> the module that defines it.
_EXPORTS = {
    "Square": "functions.saving_inputs",
    "Exp": "functions.saving_outputs",
    "Sinh": "functions.saving_intermediates",
    "SinhBad": "functions.saving_intermediates",
    "sinh": "functions.saving_intermediates",
    "Cube": "functions.untracked_backward",
    "CubeBackward": "functions.untracked_backward",
    "check": "checker",
    "check_model": "checker.model",
    "check_distributed": "distributed.check",
}
__all__ = [
    "Cube",
    "CubeBackward",
    "Exp",
    "Sinh",
    "SinhBad",
    "Square",
    "check",
    "check_distributed",
    "check_model",
    "sinh",
]

if TYPE_CHECKING:
    from .checker import check
    from .checker.model import check_model
    from .distributed.check import check_distributed
    from .functions.saving_inputs import Square
    from .functions.saving_intermediates import Sinh, SinhBad, sinh
    from .functions.saving_outputs import Exp
    from .functions.untracked_backward import Cube, CubeBackward


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name not in _EXPORTS:
        raise AttributeError(f"module 'double_backward' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})
