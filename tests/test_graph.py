"""autograd_graph: named nodes, stable ids, clear errors; graph_legend."""

from __future__ import annotations

import re

import graphviz
import pytest
import torch

from double_backward import Sinh, SinhBad, Square
from double_backward.graph import LEGEND_ENTRIES, autograd_graph, graph_legend


def square_grad_graph() -> graphviz.Digraph:
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = Square.apply(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return autograd_graph({"grad_x": grad_x}, {"x": x}, title="grad_x of Square")


def test_nodes_carry_the_given_names():
    source = square_grad_graph().source
    assert 'label="grad_x\n (2)"' in source
    assert 'label="x\n (2)"' in source
    assert "MulBackward0" in source


def test_node_ids_are_renumbered_so_the_source_is_identical_across_runs():
    first, second = square_grad_graph(), square_grad_graph()
    assert first.source == second.source
    assert not re.search(r"\d{6,}", first.source), "an id()-based node name survived"
    assert re.search(r"^\tn0 \[", first.source, flags=re.MULTILINE)


def test_title_becomes_the_comment_used_as_alt_text():
    assert square_grad_graph().comment == "grad_x of Square"


def test_several_outputs_are_drawn_in_one_graph():
    x = torch.tensor(0.5, requires_grad=True)
    value, half_exp_x, _ = Sinh.apply(x)
    source = autograd_graph(
        {"out": value, "half_exp_x": half_exp_x}, {"x": x}, title="t"
    ).source
    assert 'label="out\n ()"' in source and 'label="half_exp_x\n ()"' in source


def test_tensor_without_grad_fn_is_a_lone_node():
    x = torch.tensor(0.5, requires_grad=True)
    (grad_x,) = torch.autograd.grad(SinhBad.apply(x), x, create_graph=True)
    dot = autograd_graph({"grad_x": grad_x}, {"x": x}, title="broken")
    assert "->" not in dot.source
    assert 'label="x' not in dot.source


@pytest.mark.parametrize(
    ("outputs", "inputs", "title", "error", "message"),
    [
        ([1], {}, "t", TypeError, "'outputs' must be a mapping of names to tensors"),
        (
            {"y": [1.0]},
            {},
            "t",
            TypeError,
            "'outputs' must map str names to torch.Tensors",
        ),
        (
            {"y": torch.ones(1)},
            {"x": 1.0},
            "t",
            TypeError,
            "'inputs' must map str names",
        ),
        ({}, {}, "t", ValueError, "'outputs' is empty"),
        ({"y": torch.ones(1)}, {}, "  ", ValueError, "'title' must be a non-empty"),
    ],
)
def test_bad_arguments_are_rejected_with_what_was_expected(
    outputs, inputs, title, error, message
):
    with pytest.raises(error, match=message):
        autograd_graph(outputs, inputs, title=title)


def test_legend_has_one_node_per_colour_used_by_torchviz():
    source = graph_legend().source
    for colour, meaning in LEGEND_ENTRIES:
        assert f"fillcolor={colour}" in source
        assert meaning in source
    # The colours torchviz actually uses for inputs, drawn tensors and saved tensors:
    x = torch.tensor(1.0, requires_grad=True)
    drawn = autograd_graph({"out": Square.apply(x)}, {"x": x}, title="t").source
    assert "fillcolor=lightblue" in drawn and "fillcolor=darkolivegreen1" in drawn
    x_saved = torch.tensor(1.0, requires_grad=True)
    value, _, _ = Sinh.apply(x_saved)
    assert (
        "fillcolor=orange"
        in autograd_graph({"out": value}, {"x": x_saved}, title="t").source
    )


def test_unnamed_saved_tensors_are_labelled_saved():
    x = torch.tensor(0.5, requires_grad=True)
    value, _, _ = Sinh.apply(x)
    source = autograd_graph({"out": value}, {"x": x}, title="t").source
    assert source.count('label="saved\n ()" fillcolor=orange') == 2


def test_a_saved_input_keeps_its_leaf_colour_and_is_linked_without_arrow():
    x = torch.tensor(1.0, requires_grad=True)
    source = autograd_graph({"out": Square.apply(x)}, {"x": x}, title="t").source
    assert "fillcolor=orange" not in source
    assert source.count('label="x\n ()" fillcolor=lightblue') == 1
    assert re.search(
        r"^\tn\d+ -> n\d+ \[dir=none style=dashed color=darkorange3\]$",
        source,
        flags=re.MULTILINE,
    )


def test_cpp_function_nodes_are_labelled_with_their_cpp_name():
    # torchviz would label every C++ autograd Function "CppFunction".
    from double_backward.functions.cpp_extension import cube

    x = torch.tensor([1.0, 2.0], dtype=torch.float64, requires_grad=True)
    out = cube(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    source = autograd_graph(
        {"out": out, "grad_x": grad_x}, {"x": x}, title="cube in C++"
    ).source
    assert 'label="CppNode<Cube>"' in source
    assert 'label="CppNode<CubeBackward>"' in source
    assert "CppFunction" not in source
