"""Square: the input saved for backward keeps its history."""

from __future__ import annotations

import torch

from double_backward import Square


def test_square_backward_of_a_non_leaf_input_reaches_through_its_history():
    # x is itself computed: the saved input is a non-leaf whose grad_fn backward can follow.
    leaf = torch.tensor([1.5, -0.5], dtype=torch.float64, requires_grad=True)
    x = leaf * 2
    (grad_leaf,) = torch.autograd.grad(Square.apply(x).sum(), leaf, create_graph=True)
    torch.testing.assert_close(grad_leaf, 8 * leaf.detach())
    (second,) = torch.autograd.grad(grad_leaf.sum(), leaf)
    torch.testing.assert_close(second, torch.full_like(second, 8.0))
