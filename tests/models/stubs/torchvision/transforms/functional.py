"""The stand-in's ``torchvision.transforms.functional``: ``InterpolationMode`` (timm builds
tables of it at import time); any other name is a class that raises when used."""

import enum

from .._missing import missing


class InterpolationMode(enum.Enum):
    """torchvision's interpolation modes, by the same names and values."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def __getattr__(name: str) -> type:
    return missing(__name__, name)
