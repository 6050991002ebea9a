"""Check a custom Function for double-backward support, and say what is wrong in plain words.

>>> from double_backward import check, Square
>>> report = check(Square.apply, torch.randn(3, 3))
>>> report.ok
True

From the command line, on any importable Function or function::

    python -m double_backward.checker double_backward:SinhBad --shape 3,3

**The verdict comes from evidence.** A problem is reported only when something was seen to
fail at your inputs (:mod:`~double_backward.checker.function.evidence`):

1. calling the Function (an error it raises is reported as that, with its message; NaN or inf
   in the outputs is said plainly);
2. the first derivative: :func:`~torch.autograd.gradcheck` while its Jacobians are small,
   backward's linearity in the incoming gradient, and the vector-Jacobian product with random
   *signed* incoming gradients against central differences, at every size;
3. the second derivative: :func:`~torch.autograd.gradgradcheck` while small, and the
   Hessian-vector product and the mixed term (through an incoming gradient that requires
   grad, as in a gradient penalty) against central differences of the gradient, in random
   directions, at every size;
4. the incoming gradients real use feeds, to backward and to the backward of backward
   (:mod:`~double_backward.checker.function.modes`): transposed and expanded ones, missing
   ones (gradcheck's ``check_undefined_grad``) and batched ones (``is_grads_batched``,
   gradcheck's ``check_batched_grad``: a note unless ``require_batched_grad=True``);
5. forward mode against reverse mode (when the Function has a ``jvp``);
6. optionally (``third_order=True``), the third derivative.

Points derived from yours (a 1% relative change) are checked too; a failure seen only there is
shown, with the point, for you to judge. With ``surrogate_gradient=True`` the first derivative
is taken as given and double backward is checked against your backward.

**Structure explains, it does not accuse** (:mod:`~double_backward.checker.function.causes`). When a
check fails, the autograd graph is read to name the *cause*, naming each tensor. A suspicious
pattern that did not fail is a note. :mod:`torch.func` support is reported, never required.

The package is laid out by role, one sub-package per checker beside what they share:

- ``checker.function``: :func:`check` on one Function:
  :mod:`~double_backward.checker.function.calling` (the Function's arguments and the points),
  :mod:`~double_backward.checker.function.evidence`,
  :mod:`~double_backward.checker.function.modes`,
  :mod:`~double_backward.checker.function.causes`, :mod:`~double_backward.checker.function.api`
  and :mod:`~double_backward.checker.function.cli`;
- ``checker.model``: :func:`~double_backward.check_model` on a whole model;
- ``checker.shared``: the problems and their rendering (``report``), central differences
  (``finite_differences``) and the fixes for built-ins (``fixes``, ``cuda_fixes``).

torch and NumPy only.
"""

from __future__ import annotations

from .function.api import check
from .function.cli import main
from .function.evidence import FULL_MODE_UP_TO, JACOBIAN_ENTRIES, TOLERANCES
from .shared.report import DOCS_URL, PAGES, Problem, Report

__all__ = [
    "DOCS_URL", "FULL_MODE_UP_TO", "JACOBIAN_ENTRIES", "PAGES", "TOLERANCES", "Problem",
    "Report", "check", "main",
]  # fmt: skip
