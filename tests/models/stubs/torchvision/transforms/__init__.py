"""The stand-in's ``torchvision.transforms``: any name is a class that raises when used."""

from .._missing import missing
from .functional import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str) -> type:
    return missing(__name__, name)
