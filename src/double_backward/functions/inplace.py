"""In-place edits, returned inputs and views: which keep double backward right, which do not.

``ExpInplace`` and ``ReturnsInputAsIs`` are correct. The others are **broken on purpose**, each
in a way the page on in-place Functions executes: ``ExpInplaceSavesInputCopy`` (a wrong second
derivative), ``SquareInplaceSavesInput`` (a silently wrong *first* derivative, no error) and
``SquareEditsGradOut`` (an error, or a silently wrong gradient, depending on the caller).
"""

from __future__ import annotations

from typing import Any

import torch

from ._validation import check_real_tensor


class ExpInplace(torch.autograd.Function):
    """y = eˣ computed in x's own memory, marked dirty; saves the output y.

    ``ctx.mark_dirty(x)`` tells autograd that x was modified: the returned tensor becomes the
    output of this Function, with a new version. Backward needs eˣ, which is exactly the
    output, so it saves the output: tracked like any output, its grad_fn is this Function's
    backward, and grad_x = grad_out · y has a graph back to x, as for ``Exp``. x must not be a
    leaf that requires grad: autograd refuses in-place edits of those, but only after forward
    has run, with x already overwritten; this Function refuses before. Pass ``x.clone()``.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("ExpInplace", "x", x)
        if x.is_leaf and x.requires_grad:
            raise ValueError(
                "ExpInplace: 'x' is a leaf tensor that requires grad, which autograd does not "
                "let you edit in place. Pass a copy: ExpInplace.apply(x.clone())."
            )
        x.exp_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x)  # now the output eˣ, tracked
        return x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (result,) = ctx.saved_tensors
        return grad_out * result


class ExpInplaceSavesInputCopy(torch.autograd.Function):
    """BROKEN ON PURPOSE: y = eˣ in place, saving a copy of x taken before the edit.

    The copy is made inside forward, where nothing is recorded: an intermediate with no
    history. grad_x = grad_out · exp(copy) is right, but has no graph back to x, so the
    second derivative misses the term through x (gradgradcheck fails). Fix: save the output,
    as ``ExpInplace`` does.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("ExpInplaceSavesInputCopy", "x", x)
        x_before = x.clone()  # no history: forward is not recorded
        x.exp_()
        ctx.mark_dirty(x)
        ctx.save_for_backward(x_before)
        return x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x_before,) = ctx.saved_tensors
        return grad_out * torch.exp(x_before)


class SquareInplaceSavesInput(torch.autograd.Function):
    """BROKEN ON PURPOSE: saves x, then squares x in place; backward reads x² as x.

    ``save_for_backward(x)`` keeps the tensor, not its values. ``x.pow_(2)`` then overwrites
    them, and after ``mark_dirty`` the saved tensor *is* the output, at the version autograd
    expects: no "modified by an inplace operation" error. Backward computes 2 · x² · grad_out
    instead of 2 · x · grad_out: a silently wrong *first* derivative. No fix keeps the edit in
    place: backward needs x, and x² loses its sign. Use the out-of-place ``Square``.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SquareInplaceSavesInput", "x", x)
        ctx.save_for_backward(x)
        x.pow_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors  # holds x² by now
        return 2 * x * grad_out


class ReturnsInputAsIs(torch.autograd.Function):
    """y = x, returning the input tensor itself; backward passes the gradient through.

    Gradient-scaling, logging and marker Functions do this. Autograd makes the output a view
    of the input (so both share memory) and refuses, with an error, any later in-place edit of
    either: its view+inplace handling would bypass this Function's backward. Double backward
    works: grad_x = grad_out is differentiable. To edit the result in place, return
    ``x.clone()`` instead (one more tensor of memory).
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("ReturnsInputAsIs", "x", x)
        return x

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        return grad_out


class SquareEditsGradOut(torch.autograd.Function):
    """BROKEN ON PURPOSE: y = x², whose backward multiplies grad_out in place.

    grad_out belongs to the caller. It may be a broadcast view of one number (``y.sum()``'s
    gradient: the edit raises), a leaf that requires grad (gradgradcheck's: the edit raises),
    or the same tensor autograd hands to another branch (``h + f(h)``: add's backward gives
    both branches one tensor, and the other branch then reads the edited values: a silently
    wrong gradient). Fix: ``return 2 * x * grad_out``, out of place, as ``Square`` does.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        check_real_tensor("SquareEditsGradOut", "x", x)
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_out.mul_(2 * x)
