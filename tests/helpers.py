"""Shared test helpers: the correct Functions with their native twins, derivatives, graph walks."""

from __future__ import annotations

import pytest
import torch

from double_backward import Cube, Exp, Square, sinh
from double_backward.functions import cpp_extension
from double_backward.functions.custom_ops import cube
from double_backward.functions.higher_orders import derivatives

# Each correct Function of the tutorial (and the custom-operator cube) next to the native op
# it must match, to every order.
CORRECT_FUNCTIONS = [
    pytest.param(Square.apply, lambda x: x**2, id="Square"),
    pytest.param(Exp.apply, torch.exp, id="Exp"),
    pytest.param(sinh, torch.sinh, id="Sinh"),
    pytest.param(Cube.apply, lambda x: x**3, id="Cube"),
    # The same case as a C++ extension: a torch::autograd::Function calling another.
    pytest.param(cpp_extension.cube, lambda x: x**3, id="CppCube"),
    # The same case as two torch.library custom operators (NumPy forward and backward).
    pytest.param(cube, lambda x: x**3, id="cube-custom-op"),
]

# Those that take every dtype the native op takes; the C++ kernel takes float32 and float64
# only (its dtype handling is tested in test_cpp_extension.py).
ANY_DTYPE_FUNCTIONS = [param for param in CORRECT_FUNCTIONS if param.id != "CppCube"]

__all__ = ["ANY_DTYPE_FUNCTIONS", "CORRECT_FUNCTIONS", "derivatives"]
