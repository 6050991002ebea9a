"""Counting saved tensors and peak memory, against expectations worked out independently.

Expected counts come from what torch documents each op saves (derivatives.yaml: exp saves its
result, mul saves both operands, pow saves its base) and from numel · itemsize, never from a
run of the code under test.
"""

from __future__ import annotations

import pytest
import torch

from double_backward import Exp, Square, sinh
from double_backward.costs import (
    CASES,
    EXTRA,
    INPUT,
    NEW,
    OUTPUT,
    aten_ops,
    backward_ops,
    double_backward,
    forward_backward,
    held_memory,
    load_measurements,
    ops_listing,
    peak_memory,
    penalty_double_backward,
    saved_tensors,
)
from double_backward.functions.sinh_variants import sinh_tutorial

N = 1000


def roles(saved) -> list[tuple[str, int]]:
    return sorted((s.role, s.nbytes) for s in saved)


def test_a_saved_input_is_counted_once_with_its_exact_bytes():
    report = saved_tensors(Square.apply, torch.randn(N))
    assert roles(report.forward) == [(INPUT, N * 4)]
    assert report.extra == () and report.extra_bytes == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_saved_output_is_the_output_and_bytes_follow_the_dtype(dtype):
    report = saved_tensors(Exp.apply, torch.randn(N, dtype=dtype))
    itemsize = torch.finfo(dtype).bits // 8
    assert roles(report.forward) == [(OUTPUT, N * itemsize)]


def test_an_intermediate_saved_by_two_ops_counts_once_as_extra():
    # exp saves its result; mul saves both operands: e^x (again) and x.
    report = saved_tensors(lambda x: torch.exp(x) * x, torch.randn(N))
    assert roles(report.forward) == [(EXTRA, N * 4), (INPUT, N * 4)]
    assert report.extra_bytes == N * 4


def test_sinh_saves_two_extra_tensors_its_native_op_none():
    assert roles(saved_tensors(sinh, torch.randn(N)).extra) == [(EXTRA, N * 4)] * 2
    assert saved_tensors(torch.sinh, torch.randn(N)).extra == ()


def test_a_view_of_one_storage_counts_the_whole_storage_once():
    # x[::2] views x; mul saves the view twice (as both operands): one storage, x's bytes.
    report = saved_tensors(lambda x: x[::2] * x[::2], torch.randn(N))
    assert roles(report.forward) == [(INPUT, N * 4)]


def test_materialised_zeros_are_saved_anew_by_the_create_graph_backward():
    # The tutorial's backward multiplies two zeros tensors by saved tensors needing grad;
    # mul saves each zeros tensor for the second backward.
    report = saved_tensors(sinh_tutorial, torch.randn(N))
    assert roles(report.new_in_backward) == [(NEW, N * 4)] * 2
    assert report.new_in_backward_bytes == 2 * N * 4
    assert saved_tensors(sinh, torch.randn(N)).new_in_backward == ()


@pytest.mark.parametrize(
    ("fn", "x", "message"),
    [
        ("not callable", torch.randn(3), "'fn' must be callable"),
        (torch.exp, torch.arange(3), "floating-point torch.Tensor, got torch.int64"),
        (torch.exp, [1.0], "floating-point torch.Tensor, got list"),
        (lambda x: x.detach(), torch.randn(3), "must return a tensor that depends on x"),
    ],
)
def test_bad_input_is_refused_saying_what_was_expected(fn, x, message):
    with pytest.raises((TypeError, ValueError), match=message):
        saved_tensors(fn, x)


def test_aten_ops_lists_the_kernels_of_forward_and_backward_in_order():
    x = torch.randn(3, requires_grad=True)
    # exp saves its result; its backward multiplies the incoming gradient by it.
    ops = aten_ops(lambda: torch.exp(x).sum().backward())
    last_mul = len(ops) - 1 - ops[::-1].index("mul")
    assert ops.index("exp") < ops.index("sum") < last_mul


def test_peak_memory_is_the_most_held_at_once():
    def two_then_one():
        a = torch.empty(N * 100)
        b = torch.empty(N * 100)
        del a
        c = torch.empty(N * 100)
        del b, c

    assert peak_memory(two_then_one) == 2 * N * 100 * 4


def test_peak_memory_counts_a_returned_tensor_and_nothing_allocated_before():
    before = torch.empty(N * 100)
    assert peak_memory(lambda: torch.empty(N * 10, dtype=torch.float64)) == N * 10 * 8
    # empty_like allocates one tensor of before's size; before itself is not counted.
    assert peak_memory(lambda: torch.empty_like(before)) == N * 100 * 4


def test_peak_memory_refuses_another_device():
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        peak_memory(lambda: None, "meta")


def test_the_timed_steps_compute_the_first_and_second_derivatives():
    x, grad_out, grad_grad_x = (torch.randn(N, dtype=torch.float64) for _ in range(3))
    # y = x²: grad_x = 2x · grad_out, and d(grad_x)/dx · v = 2 · grad_out · v.
    torch.testing.assert_close(forward_backward(Square.apply, x, grad_out), 2 * x * grad_out)
    torch.testing.assert_close(
        double_backward(Square.apply, x, grad_out, grad_grad_x), 2 * grad_out * grad_grad_x
    )


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_case_is_compared_with_a_native_op_computing_the_same(case):
    x, grad_out, grad_grad_x = (torch.randn(50, dtype=torch.float64) for _ in range(3))
    torch.testing.assert_close(case.custom(x), case.native(x))
    torch.testing.assert_close(
        double_backward(case.custom, x, grad_out, grad_grad_x),
        double_backward(case.native, x, grad_out, grad_grad_x),
    )


def test_the_committed_measurements_cover_every_case_and_size():
    measurements = load_measurements()
    measured = {(row["case"], row["size"]) for row in measurements["devices"]["cpu"]["times"]}
    expected = {(case.name, size) for case in CASES for size in measurements["settings"]["sizes"]}
    assert measured == expected
    assert measurements["settings"]["rounds"] >= 11
    assert measurements["settings"]["threads"] == 1
    assert {"cpu", "cores", "torch", "numpy"} <= set(measurements["machine"])



# held_memory: expected bytes are numel · itemsize of the tensors torch documents each op to
# keep (exp saves its result; mul saves both operands), not a run of the code under test.
def test_held_memory_counts_a_returned_tensor():
    _, held = held_memory(lambda: torch.empty(N, dtype=torch.float64))
    assert held == N * 8


def test_held_memory_counts_nothing_for_a_freed_temporary():
    _, held = held_memory(lambda: torch.empty(N).sum().item())
    assert held == 0


def test_held_memory_counts_the_saved_intermediate_a_graph_keeps():
    x = torch.randn(N, dtype=torch.float64, requires_grad=True)
    # The output, plus e^x, which mul saves and only the graph keeps alive.
    out, held = held_memory(lambda: torch.exp(x) * x)
    assert held == 2 * N * 8
    # The backward frees the saved e^x: what it leaves is the gradient, minus e^x.
    _, freed = held_memory(lambda: torch.autograd.grad(out.sum(), x))
    assert freed == 0  # + the gradient (N·8 bytes), - the freed e^x (N·8 bytes)


def test_held_memory_refuses_what_is_not_callable():
    with pytest.raises(TypeError, match="'step' must be callable"):
        held_memory(torch.empty(3))
def test_the_committed_call_overhead_measurements_say_what_the_pages_print():
    measurements = load_measurements("call_overhead")
    assert {"cpu", "cores", "torch", "load_average_start"} <= set(measurements["machine"])
    for kind in ("forward", "forward_backward"):
        row = measurements["calls"][kind]
        assert row["cube operator us"] > 0 and row["Cube Function us"] > 0
        assert row["operator / Function"] > 0
    compile_row = measurements["compile Square (aot_eager)"]
    assert compile_row["after reset, best s"] <= compile_row["after reset, worst s"]
    assert compile_row["eager call us"] > 0


def test_backward_ops_of_a_native_square_are_the_kernels_of_its_derivative_formula():
    # x**2 is pow: its backward formula is grad · 2 · x.pow(1), so the first backward runs a
    # pow and the second backward differentiates it again (a pow among its kernels).
    first, second = backward_ops(lambda t: t**2, torch.randn(3))
    assert "pow" in first and "mul" in first
    assert "pow" in second


def test_the_penalty_step_differentiates_with_respect_to_x_and_grad_out():
    x, grad_out, grad_grad_x = (torch.randn(N, dtype=torch.float64) for _ in range(3))
    # y = x²: grad_x = 2x · grad_out; its derivative along grad_grad_x is 2 · grad_out ·
    # grad_grad_x in x and 2x · grad_grad_x in grad_out (by hand).
    grad2_x, grad2_grad_out = penalty_double_backward(Square.apply, x, grad_out, grad_grad_x)
    torch.testing.assert_close(grad2_x, 2 * grad_out * grad_grad_x)
    torch.testing.assert_close(grad2_grad_out, 2 * x * grad_grad_x)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_case_agrees_with_its_native_op_in_the_penalty_step(case):
    x, grad_out, grad_grad_x = (torch.randn(50, dtype=torch.float64) for _ in range(3))
    for ours, native in zip(
        penalty_double_backward(case.custom, x, grad_out, grad_grad_x),
        penalty_double_backward(case.native, x, grad_out, grad_grad_x),
        strict=True,
    ):
        torch.testing.assert_close(ours, native)


def test_cube_skips_the_grad_out_term_only_when_grad_out_does_not_require_grad():
    # CubeBackward's term for grad_out is 3x² · (a pow and two mul): skipped with a plain
    # grad_out, computed when grad_out requires grad, as in a penalty.
    from double_backward import Cube

    plain = backward_ops(Cube.apply, torch.randn(3))[1]
    penalty = backward_ops(Cube.apply, torch.randn(3), grad_out_requires_grad=True)[1]
    assert "pow" not in plain
    assert "pow" in penalty
    assert len(penalty) == len(plain) + 3


def test_the_committed_measurements_time_both_double_backward_cases():
    measurements = load_measurements()
    kinds = {row["kind"] for row in measurements["devices"]["cpu"]["times"]}
    assert kinds == {"forward_backward", "double_backward", "penalty_double_backward"}
    for row in measurements["targets"]:
        assert row["penalty_time_met"] == (row["penalty_time_ratio"] <= row["time_target"])


def test_ops_listing_never_runs_a_long_label_into_the_ops():
    short = ops_listing("Square, first backward", ["ones_like", "mul"], indent=32)
    assert short == f"{'Square, first backward':<32}ones_like mul"
    long_label = "setup_context Cube, second backward"
    listing = ops_listing(long_label, ["ones_like", "mul"], indent=32)
    assert listing.splitlines() == [long_label, " " * 32 + "ones_like mul"]
