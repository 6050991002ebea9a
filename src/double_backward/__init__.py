"""Custom ``torch.autograd.Function``\\ s whose backward can itself be differentiated.

One module per case of PyTorch's "Double Backward with Custom Functions" tutorial:

- :mod:`double_backward.saving_inputs`: :class:`Square`
- :mod:`double_backward.saving_outputs`: :class:`Exp`
- :mod:`double_backward.saving_intermediates`: :class:`Sinh`, :func:`sinh`, :class:`SinhBad`
- :mod:`double_backward.untracked_backward`: :class:`Cube`, :class:`CubeBackward`
"""

from .saving_inputs import Square
from .saving_intermediates import Sinh, SinhBad, sinh
from .saving_outputs import Exp
from .untracked_backward import Cube, CubeBackward

__all__ = ["Cube", "CubeBackward", "Exp", "Sinh", "SinhBad", "Square", "sinh"]
__version__ = "0.1.0"
