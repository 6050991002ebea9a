"""What one ``check`` costs, counted: calls of the Function's forward, backward and double
backward at a size above gradcheck's (the directions alone), so that a change that makes the
check call the Function more often shows here, not only in ``nox -s bench_checker``'s
timings. And the mixed term, checked through backward, still catches a double backward that
loses it."""

from __future__ import annotations

import collections

import pytest
import torch

from double_backward import check

calls: collections.Counter = collections.Counter()


class _CubeBackward(torch.autograd.Function):
    """g = 3x²v, the backward of x³, as a Function of its own: its forward is one backward
    of the cube, its backward one double backward."""

    @staticmethod
    def forward(ctx, x, v):
        calls["backward"] += 1
        ctx.save_for_backward(x, v)
        return 3 * x * x * v

    @staticmethod
    def backward(ctx, gg):
        calls["double backward"] += 1
        x, v = ctx.saved_tensors
        return 6 * x * v * gg, 3 * x * x * gg


class CountedCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        calls["forward"] += 1
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _CubeBackward.apply(x, grad)


def _randn(size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=generator, dtype=torch.float64)


def test_the_cube_is_right():  # independent: the counted cube against x**3 by autograd
    x, v, u = _randn(50), _randn(50, seed=1), _randn(50, seed=2)
    hvps = []
    for fn in (CountedCube.apply, lambda t: t**3):
        leaf = x.clone().requires_grad_()
        (grad,) = torch.autograd.grad(fn(leaf), leaf, v, create_graph=True)
        hvps.append(torch.autograd.grad(grad, leaf, u)[0])
    torch.testing.assert_close(hvps[0], hvps[1])


# Counted at 10⁴ elements, default settings, every check passing (torch 2.13): 28 forwards,
# 16 backwards (each run of the cube's backward Function, the two inside the HVPs included),
# 2 double backwards (the default two directions, one HVP each). Before issue 41's changes:
# 45, 20 and 3. Then the incoming-gradient modes (modes.py), once per order, add: at order 1
# one forward and five backwards (contiguous, transposed, expanded, undefined, batched; one
# output, so none is left out in turn); at order 2 one forward, one backward (the gradient
# with create_graph) and five double backwards (the same five feeds). torch.func's batched
# probes do not run: the cube has no vmap rule. No room: a new pass over the Function must
# raise these on purpose.
LIMITS = {"forward": 28 + 2, "backward": 16 + 6, "double backward": 2 + 5}


def test_one_check_calls_the_function_a_bounded_number_of_times():
    calls.clear()
    report = check(CountedCube.apply, _randn(10_000))
    assert report.ok, str(report)
    counted = dict(calls)
    for what, limit in LIMITS.items():
        assert counted.get(what, 0) <= limit, (what, counted)
    assert counted["double backward"] >= 2  # the default two directions, each one HVP


class SquareDetachingIncoming(torch.autograd.Function):
    """BROKEN: backward detaches its incoming gradient, so double backward loses the mixed
    term (the derivative in grad_out) while its Hessian-vector product stays right."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad.detach()


@pytest.mark.parametrize("size", [1_000, 100_000])
def test_a_lost_mixed_term_is_caught_above_gradchecks_size(size):
    x, v, u = _randn(size), _randn(size, seed=1), _randn(size, seed=2)
    # Independent: by autograd, the mixed term d/dv (uᵀ g(x, v)) is 0 here, 2xu natively,
    # while the Hessian-vector products agree.
    seconds = []
    for fn in (SquareDetachingIncoming.apply, torch.square):
        leaf, incoming = x.clone().requires_grad_(), v.clone().requires_grad_()
        (grad,) = torch.autograd.grad(fn(leaf), leaf, incoming, create_graph=True)
        seconds.append(torch.autograd.grad(grad, (leaf, incoming), u, allow_unused=True,
                                           materialize_grads=True))  # fmt: skip
    torch.testing.assert_close(seconds[0][0], seconds[1][0])  # the HVPs agree
    assert float(seconds[0][1].abs().max()) == 0 < float(seconds[1][1].abs().max())
    report = check(SquareDetachingIncoming.apply, x)
    assert not report.ok, str(report)
