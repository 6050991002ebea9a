"""A stand-in for torchvision, on sys.path only in the real-model tests (tests/models).

The only torchvision for torch 2.13 is a CUDA build whose operators cannot load against the
CPU torch. timm 1.x imports one name from it at import time, ``FrozenBatchNorm2d`` (for its
norm-layer table); no model built here uses it. transformers does not import torchvision for
the text and vision models built here (it checks the installed distribution, which this is
not). Anything else asked of this stand-in fails at once, naming it.
"""

__version__ = "0.0.0+stub"
