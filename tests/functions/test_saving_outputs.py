"""Exp: the output saved for backward carries Exp's own backward as grad_fn."""

from __future__ import annotations

import torch

from double_backward import Exp


def test_exp_grad_x_is_built_from_the_saved_output():
    x = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    out = Exp.apply(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    # grad_x = grad_out * out: its graph goes through Exp's backward node, i.e. out's grad_fn.
    next_nodes = [node for node, _ in grad_x.grad_fn.next_functions if node is not None]
    assert out.grad_fn in next_nodes
