"""The Functions the pages teach, one module per case, and the failures, broken on purpose.

- :mod:`~double_backward.functions.saving_inputs`: ``Square``
- :mod:`~double_backward.functions.saving_outputs`: ``Exp``
- :mod:`~double_backward.functions.saving_intermediates`: ``Sinh``, ``sinh``, ``SinhBad``
- :mod:`~double_backward.functions.untracked_backward`: ``Cube``, ``CubeBackward``
- :mod:`~double_backward.functions.setup_context_style`: the same cases in the modern API
- :mod:`~double_backward.functions.higher_orders`: ``Sin``, ``Cos`` and ``derivatives``
- :mod:`~double_backward.functions.softmax`: softmax three ways (``Softmax``,
  ``SoftmaxHandWritten`` with ``SoftmaxBackward``, ``SoftmaxWithJvp``)
- :mod:`~double_backward.functions.layer_norm`: ``LayerNorm`` with weight and bias, and
  ``LayerNormWithStatistics``
- :mod:`~double_backward.functions.failures`: every mistake of the failure gallery
"""
