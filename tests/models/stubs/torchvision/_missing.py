"""Names the stand-in does not provide: a class that raises when used, naming itself."""

from __future__ import annotations

from typing import Any


def missing(module: str, name: str) -> type:
    """A class ``name`` (timm subclasses some at import time) that raises when constructed."""
    if name.startswith("__"):
        raise AttributeError(name)

    def refuse(self: Any, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            f"{module}.{name} is not available: this torchvision is the tests' stand-in "
            "(tests/models/stubs), for building models only"
        )

    return type(name, (), {"__init__": refuse, "__module__": module})
