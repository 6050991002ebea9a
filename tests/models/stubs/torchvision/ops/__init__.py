"""The stand-in's ``torchvision.ops``: only ``misc.FrozenBatchNorm2d``."""
