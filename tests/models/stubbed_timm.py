"""``import timm`` without torchvision: its stand-in is importable only while timm imports.

The only torchvision for torch 2.13 is a CUDA build whose operators cannot load against the
CPU torch. timm 1.x imports a few of its names at import time (``FrozenBatchNorm2d``, the
transforms' classes, ``InterpolationMode``) and uses none of them to build a model. The
stand-in (stubs/torchvision) is put first on ``sys.path`` for that import, then taken off and
out of ``sys.modules``: transformers, which looks for torchvision with ``find_spec``, then
finds none and imports no vision-transform code.
"""

from __future__ import annotations

import sys
from pathlib import Path

STUBS = str(Path(__file__).parent / "stubs")


def import_timm():
    """timm, imported with the stand-in torchvision, which is then made invisible again."""
    if "timm" in sys.modules:
        return sys.modules["timm"]
    if "torchvision" in sys.modules:
        raise RuntimeError(
            "a torchvision is already imported: the stand-in would not be used"
        )
    sys.path.insert(0, STUBS)
    try:
        import timm
    finally:
        sys.path.remove(STUBS)
        for name in [
            n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")
        ]:
            del sys.modules[name]
    return timm
