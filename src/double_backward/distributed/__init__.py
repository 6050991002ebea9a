"""Double backward under ``DistributedDataParallel`` and FSDP, checked on local processes.

- :mod:`~double_backward.distributed.check`: :func:`~double_backward.check_distributed`,
  whether your penalty's gradient is synchronized across processes, compared with one process;
- :mod:`~double_backward.distributed.sync`: :func:`synchronized_gradients`, a step whose
  gradients are averaged explicitly (the fix the page measures);
- :mod:`~double_backward.distributed.launch`: :func:`launch`, a function on N local
  processes joined by ``gloo`` over the loopback interface, with a timeout;
- :mod:`~double_backward.distributed.wrapped`: :func:`wrapped_model_message`, what
  ``check_model`` says of a wrapped model;
- :mod:`~double_backward.distributed.steps`: the training steps the page measures.
"""

from __future__ import annotations

from .check import Case, DistributedReport, Step, check_cases, check_distributed
from .launch import LaunchTimeout, RankFailed, launch
from .sync import synchronized_gradients
from .wrapped import wrapped_model_message

__all__ = [
    "Case",
    "DistributedReport",
    "LaunchTimeout",
    "RankFailed",
    "Step",
    "check_cases",
    "check_distributed",
    "launch",
    "synchronized_gradients",
    "wrapped_model_message",
]
