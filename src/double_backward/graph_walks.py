"""Walks of autograd graphs, with torch only: shared by the checker and the drawing helper.

Kept apart from :mod:`double_backward.graph` so that checking a Function needs neither torchviz
nor graphviz.
"""

from __future__ import annotations

import torch

__all__ = ["reaches"]


def reaches(tensor: torch.Tensor, leaf: torch.Tensor) -> bool:
    """Whether ``tensor``'s autograd graph has a path back to the leaf tensor ``leaf``.

    Walks ``grad_fn.next_functions`` looking for the ``AccumulateGrad`` node of ``leaf``. A
    gradient computed with ``create_graph=True`` can be differentiated with respect to ``leaf``
    only if this is true.
    """
    if not isinstance(tensor, torch.Tensor) or not isinstance(leaf, torch.Tensor):
        raise TypeError(
            f"reaches: expected two tensors, got {type(tensor).__name__} and {type(leaf).__name__}"
        )
    if not leaf.is_leaf:
        raise ValueError(
            "reaches: 'leaf' must be a leaf tensor (created by the user, not computed)"
        )
    stack, seen = [tensor.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if getattr(node, "variable", None) is leaf:
            return True
        stack.extend(next_node for next_node, _ in node.next_functions)
    return False
