"""Draw autograd graphs with torchviz, with named nodes and stable node ids.

:func:`autograd_graph` wraps torchviz's ``make_dot``. It names the tensors you pass (``x``,
``out``, ``grad_x``) and renumbers torchviz's node ids, which are Python ``id()`` values and so
change from run to run, into ``n0, n1, ...`` in drawing order: the same graph gives the same
DOT source, and the same SVG, on every build. :func:`graph_legend` draws the colour key. The
question the graphs are drawn to answer, is there a path back to x?, is answered by
:func:`double_backward.graph_walks.reaches`.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping

import torch

from ._extras import missing_extra

try:
    import graphviz
    import torchviz
except ImportError as error:  # the "graphs" extra
    raise missing_extra("double_backward.graph (drawing graphs)", "graphs", error) from error

__all__ = ["autograd_graph", "graph_legend"]


# torchviz 0.0.3 compares torch versions with distutils' LooseVersion, which warns on every call.
_TORCHVIZ_VERSION_WARNING = "distutils Version classes are deprecated"

# A node line ("\t<id> [label=...]") or an edge line ("\t<id> -> <id> [...]") of torchviz's body.
_ID_PREFIX = re.compile(r"^\t(\d+)(?: -> (\d+))?")

# A node line after renumbering: "\tn12 [label=...".
_NODE_LINE = re.compile(r"^\t(n\d+) \[")

# The fill colours torchviz uses, explained once per page by graph_legend(), in reading order.
LEGEND_ENTRIES = (
    ("lightblue", "leaf tensor that requires grad (x)"),
    ("lightgrey", "backward node: a grad_fn"),
    ("orange", "tensor saved for backward"),
    ("darkolivegreen1", "tensor being drawn (out, grad_x)"),
)
SAVED_LINK_COLOUR = "darkorange3"
_SAVED_LINK_STYLE = f"[dir=none style=dashed color={SAVED_LINK_COLOUR}]"


def _check_named_tensors(argument: str, tensors: object) -> Mapping[str, torch.Tensor]:
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"autograd_graph: '{argument}' must be a mapping of names to tensors, "
            f"e.g. {{'x': x}}, got {type(tensors).__name__}"
        )
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise TypeError(
                f"autograd_graph: '{argument}' must map str names to torch.Tensors, "
                f"got {name!r}: {type(tensor).__name__}"
            )
    return tensors


def _cpp_nodes(tensors: tuple[torch.Tensor, ...]) -> list[object]:
    """The C++ autograd nodes behind ``tensors`` (a C++ extension's Functions).

    torchviz labels a node by its Python type, which for every C++ Function is the same
    ``CppFunction``; their own name is ``node.name()``. The returned wrappers are kept alive
    while torchviz draws, so that its ``id()`` of each is the one seen here.
    """
    found: dict[int, object] = {}
    stack = [tensor.grad_fn for tensor in tensors if tensor.grad_fn is not None]
    while stack:
        node = stack.pop()
        if id(node) in found:
            continue
        found[id(node)] = node
        stack.extend(child for child, _ in node.next_functions if child is not None)
    return [node for node in found.values() if type(node).__name__ == "CppFunction"]


def _label_cpp_nodes(dot: graphviz.Digraph, cpp_nodes: list[object]) -> None:
    """Label C++ nodes by their C++ name, e.g. ``CppNode<CubeBackward>``."""
    labels = {
        f"\t{id(node)} [label=CppFunction]\n": f'\t{id(node)} [label="'
        + node.name().removeprefix("torch::autograd::")  # type: ignore[attr-defined]
        + '"]\n'
        for node in cpp_nodes
    }
    dot.body = [labels.get(line, line) for line in dot.body]


def _renumber_nodes(dot: graphviz.Digraph) -> None:
    """Replace id()-based node names with n0, n1, ... in order of first appearance."""
    names: dict[str, str] = {}

    def rename(match: re.Match[str]) -> str:
        for node_id in match.groups():
            if node_id is not None and node_id not in names:
                names[node_id] = f"n{len(names)}"
        line = "\t" + names[match[1]]
        return line if match[2] is None else f"{line} -> {names[match[2]]}"

    dot.body = [_ID_PREFIX.sub(rename, line, count=1) for line in dot.body]


def _tidy_saved_tensors(dot: graphviz.Digraph) -> None:
    """Label unnamed saved tensors "saved"; keep a saved input or output in its own colour.

    torchviz draws every tensor a custom Function saved as an orange node. When that tensor is
    already in the graph (a saved input like x), the orange node would repaint it: drop it, and
    let the dashed line to the backward node say that it was saved.
    """
    defined: set[str] = set()
    body = []
    for line in dot.body:
        node = _NODE_LINE.match(line)
        if node and "fillcolor=orange" in line:
            if node[1] in defined:
                continue
            line = line.replace('[label="\n', '[label="saved\n', 1)
        if node:
            defined.add(node[1])
        elif "[dir=none]" in line:  # torchviz's link from a saved tensor to its node
            line = line.replace("[dir=none]", _SAVED_LINK_STYLE)
        body.append(line)
    dot.body = body


def autograd_graph(
    outputs: Mapping[str, torch.Tensor],
    inputs: Mapping[str, torch.Tensor],
    *,
    title: str,
) -> graphviz.Digraph:
    """Return the autograd graph that ends in ``outputs``, as a :class:`graphviz.Digraph`.

    Args:
        outputs: the tensors to draw, by name, e.g. ``{"grad_x": grad_x}``. A tensor without
            a ``grad_fn`` is drawn as a lone node: it has no graph.
        inputs: leaf tensors to label, by name, e.g. ``{"x": x}``.
        title: a one-line description of the graph, used as the image's alt text.

    Node ids are renumbered so that the DOT source is the same from run to run.
    """
    _check_named_tensors("outputs", outputs)
    _check_named_tensors("inputs", inputs)
    if not outputs:
        raise ValueError(
            "autograd_graph: 'outputs' is empty; name at least one tensor to draw"
        )
    if not isinstance(title, str) or not title.strip():
        raise ValueError(
            "autograd_graph: 'title' must be a non-empty description of the graph"
        )
    tensors = tuple(outputs.values())
    cpp_nodes = _cpp_nodes(tensors)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_TORCHVIZ_VERSION_WARNING)
        dot = torchviz.make_dot(
            tensors if len(tensors) > 1 else tensors[0], params={**inputs, **outputs}
        )
    _label_cpp_nodes(dot, cpp_nodes)
    _renumber_nodes(dot)
    _tidy_saved_tensors(dot)
    dot.comment = " ".join(title.split())
    # A white card reads the same in the site's light and dark themes.
    dot.graph_attr.update(bgcolor="white", pad="0.15")
    return dot


def graph_legend() -> graphviz.Digraph:
    """Return a small graph that explains the colours and lines of :func:`autograd_graph`."""
    dot = graphviz.Digraph(
        comment="Legend: colours and lines of the autograd graphs",
        graph_attr={"bgcolor": "white", "pad": "0.15", "ranksep": "0.25"},
        node_attr={
            "style": "filled",
            "shape": "box",
            "fontname": "monospace",
            "fontsize": "10",
        },
    )
    for number, (colour, meaning) in enumerate(LEGEND_ENTRIES):
        dot.node(f"legend{number}", meaning, fillcolor=colour)
    dot.edge(
        "legend0",
        "legend1",
        label=" arrow: input of ",
        fontsize="9",
        fontname="monospace",
    )
    dot.edge(
        "legend2",
        "legend1",
        label=" dashed: saved by ",
        fontsize="9",
        fontname="monospace",
        dir="none",
        style="dashed",
        color=SAVED_LINK_COLOUR,
    )
    dot.edge(
        "legend1",
        "legend3",
        label=" arrow: computes ",
        fontsize="9",
        fontname="monospace",
    )
    return dot
