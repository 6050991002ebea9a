"""Put the double-backward check in your own test suite.

In a pytest file::

    import torch
    from double_backward.testing import assert_supports_double_backward

    from my_project.ops import MyActivation, FocalLoss


    def test_my_activation_supports_double_backward():
        assert_supports_double_backward(MyActivation.apply, torch.randn(8, 4))


    def test_focal_loss_supports_double_backward():
        logits, target = torch.randn(8, 5), torch.randint(0, 5, (8,))
        # Only the logits are differentiated; the integer target and gamma are passed as they are.
        assert_supports_double_backward(FocalLoss.apply, logits, target, 2.0)

When the check finds a problem, the test fails with the whole report: which check failed,
the cause, and the page that explains the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .checker import Report, check

__all__ = ["assert_supports_double_backward"]


def assert_supports_double_backward(
    fn: Callable[..., Any], *args: Any, **options: Any
) -> Report:
    """Run :func:`double_backward.check` on ``fn(*args, **kwargs)``; raise ``AssertionError``
    carrying the report when it finds a problem, and return the report otherwise.

    Takes the same arguments and options as :func:`~double_backward.check`: the Function's
    own keywords as ``kwargs={...}``, then ``wrt``, ``surrogate_gradient``, ``dtype``,
    ``third_order``, ...
    """
    __tracebackhide__ = True  # pytest shows the report, not this frame
    report = check(fn, *args, **options)
    if not report.ok:
        raise AssertionError(f"double backward does not work:\n{report}")
    return report
