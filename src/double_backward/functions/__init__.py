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
- :mod:`~double_backward.functions.inplace`: ``ExpInplace`` (``mark_dirty``), returned inputs,
  and in-place mistakes, broken on purpose
- :mod:`~double_backward.functions.complex_square`: ``ComplexSquare`` (the conjugate in
  backward), and the same without it, broken on purpose
- :mod:`~double_backward.functions.autocast`: ``MatmulAutocast`` (``custom_fwd`` and
  ``custom_bwd``), and the same without them, broken on purpose
- :mod:`~double_backward.functions.surrogates`: surrogate gradients (``RoundSTE``,
  ``GradientReversal``, ``ClampPassThrough``, ``FastSigmoidSpike``), one broken on purpose
- :mod:`~double_backward.functions.failures`: every mistake of the failure gallery
"""
