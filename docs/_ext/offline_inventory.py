"""Intersphinx inventories written at build time, so the build never fetches objects.inv.

Cross-references such as ``:func:`torch.autograd.grad``` resolve through these small
inventories to the official documentation pages. Each entry names the page (relative to the
project's docs root) that documents the object there; add an entry when a page mentions a new
name, and ``sphinx-build -n`` says when one is missing.
"""

from __future__ import annotations

import zlib
from pathlib import Path

_TORCH_GENERATED = [
    # (role, name): documented on generated/<name>.html
    ("py:function", "torch.autograd.grad"),
    ("py:function", "torch.autograd.backward"),
    ("py:function", "torch.autograd.gradcheck.gradcheck"),
    ("py:function", "torch.autograd.gradcheck.gradgradcheck"),
    ("py:function", "torch.autograd.function.once_differentiable"),
    ("py:function", "torch.exp"),
    ("py:function", "torch.sinh"),
    ("py:function", "torch.cosh"),
    ("py:function", "torch.softmax"),
    ("py:function", "torch.nn.functional.layer_norm"),
    ("py:function", "torch.pow"),
    ("py:function", "torch.from_numpy"),
    ("py:function", "torch.result_type"),
    ("py:function", "torch.is_grad_enabled"),
    ("py:function", "torch.manual_seed"),
    ("py:function", "torch.func.vmap"),
    ("py:function", "torch.func.grad"),
    ("py:function", "torch.func.jacrev"),
    ("py:function", "torch.func.jacfwd"),
    ("py:function", "torch.func.hessian"),
    ("py:function", "torch.func.jvp"),
    ("py:function", "torch.func.vjp"),
    ("py:class", "torch.no_grad"),
    ("py:method", "torch.autograd.function.FunctionCtx.save_for_forward"),
    ("py:class", "torch.enable_grad"),
    ("py:method", "torch.autograd.function.FunctionCtx.save_for_backward"),
    ("py:method", "torch.autograd.function.FunctionCtx.mark_non_differentiable"),
    ("py:method", "torch.autograd.function.FunctionCtx.set_materialize_grads"),
    ("py:method", "torch.autograd.function.FunctionCtx.mark_dirty"),
    ("py:method", "torch.autograd.Function.forward"),
    ("py:method", "torch.autograd.Function.backward"),
    ("py:method", "torch.autograd.Function.setup_context"),
    ("py:method", "torch.autograd.Function.jvp"),
    ("py:method", "torch.autograd.Function.vmap"),
    ("py:method", "torch.Tensor.backward"),
    ("py:method", "torch.Tensor.detach"),
    ("py:method", "torch.Tensor.numpy"),
    ("py:method", "torch.Tensor.requires_grad_"),
    ("py:attribute", "torch.Tensor.grad"),
    ("py:attribute", "torch.Tensor.requires_grad"),
    ("py:attribute", "torch.Tensor.is_leaf"),
]

INVENTORIES = {
    "torch": (
        "https://docs.pytorch.org/docs/stable/",
        [
            ("py:class", "torch.Tensor", "tensors.html#torch.Tensor"),
            (
                "py:class",
                "torch.autograd.Function",
                "autograd.html#torch.autograd.Function",
            ),
            # Where the class is defined; autodoc names base classes by it.
            (
                "py:class",
                "torch.autograd.function.Function",
                "autograd.html#torch.autograd.Function",
            ),
            (
                "py:class",
                "torch.autograd.graph.saved_tensors_hooks",
                "autograd.html#torch.autograd.graph.saved_tensors_hooks",
            ),
            ("py:class", "torch.dtype", "tensor_attributes.html#torch.dtype"),
            ("py:module", "torch.func", "func.html#module-torch.func"),
            *(
                (
                    "py:function",
                    f"torch.library.{name}",
                    f"library.html#torch.library.{name}",
                )
                for name in (
                    "custom_op",
                    "opcheck",
                    "register_autograd",
                    "register_fake",
                )
            ),
            ("py:class", "torch.device", "tensor_attributes.html#torch.device"),
            (
                "py:function",
                "torch.utils.cpp_extension.load",
                "cpp_extension.html#torch.utils.cpp_extension.load",
            ),
            # Graph lifetime, in-place and dtype pages (plot_09 to plot_11).
            (
                "py:function",
                "torch.utils.checkpoint.checkpoint",
                "checkpoint.html#torch.utils.checkpoint.checkpoint",
            ),
            ("py:function", "torch.amp.custom_fwd", "amp.html#torch.amp.custom_fwd"),
            ("py:function", "torch.amp.custom_bwd", "amp.html#torch.amp.custom_bwd"),
            ("py:class", "torch.autocast", "amp.html#torch.autocast"),
            ("py:class", "torch.amp.GradScaler", "amp.html#torch.amp.GradScaler"),
            *(
                (role, name, f"generated/{name}.html#{name}")
                for role, name in _TORCH_GENERATED
            ),
            # Aliases: torch.autograd re-exports these under shorter names.
            (
                "py:function",
                "torch.autograd.gradcheck",
                "generated/torch.autograd.gradcheck.gradcheck.html#torch.autograd.gradcheck.gradcheck",
            ),
            (
                "py:function",
                "torch.autograd.gradgradcheck",
                "generated/torch.autograd.gradcheck.gradgradcheck.html"
                "#torch.autograd.gradcheck.gradgradcheck",
            ),
        ],
    ),
    "python": (
        "https://docs.python.org/3/",
        [
            ("py:data", "typing.Any", "library/typing.html#typing.Any"),
            (
                "py:class",
                "collections.abc.Callable",
                "library/collections.abc.html#collections.abc.Callable",
            ),
            (
                "py:class",
                "collections.abc.Sequence",
                "library/collections.abc.html#collections.abc.Sequence",
            ),
            (
                "py:class",
                "collections.abc.Mapping",
                "library/collections.abc.html#collections.abc.Mapping",
            ),
            (  # check()'s wrt= (issue-17's checker, merged into this branch)
                "py:class",
                "collections.abc.Sequence",
                "library/collections.abc.html#collections.abc.Sequence",
            ),
            ("py:class", "str", "library/stdtypes.html#str"),
            ("py:class", "pathlib.Path", "library/pathlib.html#pathlib.Path"),
            ("py:class", "tuple", "library/stdtypes.html#tuple"),
            ("py:class", "dict", "library/stdtypes.html#dict"),
            ("py:data", "None", "library/constants.html#None"),
            ("py:exception", "TypeError", "library/exceptions.html#TypeError"),
            ("py:exception", "ValueError", "library/exceptions.html#ValueError"),
            ("py:exception", "RuntimeError", "library/exceptions.html#RuntimeError"),
        ],
    ),
    "numpy": (
        "https://numpy.org/doc/stable/",
        [
            (
                "py:class",
                "numpy.ndarray",
                "reference/generated/numpy.ndarray.html#numpy.ndarray",
            )
        ],
    ),
    "matplotlib": (
        "https://matplotlib.org/stable/",
        [
            (
                "py:class",
                "matplotlib.figure.Figure",
                "api/_as_gen/matplotlib.figure.Figure.html#matplotlib.figure.Figure",
            )
        ],
    ),
    "graphviz": (
        "https://graphviz.readthedocs.io/en/stable/",
        [
            ("py:class", "graphviz.Digraph", "api.html#graphviz.Digraph"),
            ("py:class", "graphviz.Graph", "api.html#graphviz.Graph"),
            ("py:class", "graphviz.graphs.Digraph", "api.html#graphviz.Digraph"),
        ],
    ),
}


def write_inventories(directory: Path) -> dict[str, tuple[str, str]]:
    """Write ``<project>.inv`` files into ``directory``; return the ``intersphinx_mapping``."""
    directory.mkdir(parents=True, exist_ok=True)
    mapping = {}
    for project, (base_url, entries) in INVENTORIES.items():
        lines = "".join(f"{name} {role} 1 {uri} -\n" for role, name, uri in entries)
        header = (
            "# Sphinx inventory version 2\n"
            f"# Project: {project}\n# Version: \n"
            "# The remainder of this file is compressed using zlib.\n"
        )
        path = directory / f"{project}.inv"
        content = header.encode() + zlib.compress(lines.encode())
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
        mapping[project] = (base_url, str(path))
    return mapping
