"""The stand-in's ``torchvision.datasets``: any name is a class that raises when used."""

from .._missing import missing


def __getattr__(name: str) -> type:
    return missing(__name__, name)
