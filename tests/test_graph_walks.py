"""reaches(): the graph walk the checker and the pages use."""

from __future__ import annotations

import pytest
import torch

from double_backward import Square
from double_backward.graph_walks import reaches


def test_reaches_follows_next_functions_to_the_leaf():
    x = torch.tensor(1.0, requires_grad=True)
    other = torch.tensor(2.0, requires_grad=True)
    y = Square.apply(x) * 3
    assert reaches(y, x)
    assert not reaches(y, other)
    assert not reaches(x.detach(), x)


def test_reaches_rejects_non_tensors_and_non_leaves():
    x = torch.tensor(1.0, requires_grad=True)
    with pytest.raises(TypeError, match="expected two tensors, got list and Tensor"):
        reaches([1.0], x)
    with pytest.raises(ValueError, match="'leaf' must be a leaf tensor"):
        reaches(x * 2, x * 3)
