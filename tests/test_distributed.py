"""double_backward.distributed on two local gloo processes, each verdict established here.

The expected gradients come from plain torch in this file: one process's gradient is the
mean over the two halves of the batch of each half's R1 gradient, and an unsynchronized
rank's gradient is its own half's. The processes are spawned by the code under test with a
join timeout, so no test can hang; the rendezvous is a file in a fresh temporary directory,
so tests never compete for a port. Select these tests with ``-m distributed``.
"""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest
import torch
from torch import nn

from double_backward import check_distributed
from double_backward.distributed import (
    Case,
    LaunchTimeout,
    check_cases,
    launch,
    synchronized_gradients,
    wrapped_model_message,
)

pytestmark = pytest.mark.distributed
TIMEOUT = 90.0  # seconds for one launch; a few are needed on 2 busy CPUs


# -- the model and steps, top-level so that the spawned processes can import them --------
def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)).double()


def r1(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    (grad_x,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    return (grad_x * grad_x).sum()


def r1_with_critic_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    out = model(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    return out.mean() + (grad_x * grad_x).sum()


def r1_synchronized(model: nn.Module, x: torch.Tensor) -> None:
    with synchronized_gradients(model):
        r1(model, x).backward()


def backward_then_x_grad(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    model(x).sum().backward(create_graph=True)
    return (x.grad * x.grad).sum()


def raises_everywhere(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    raise ValueError("this step is broken\nsecond line")


def all_reduce_rank(rank: int, world_size: int) -> float:
    import torch.distributed as dist

    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    return value.item()


def sleeps(rank: int, world_size: int) -> None:
    time.sleep(600)


def raises_on_rank_1(rank: int, world_size: int) -> int:
    if rank == 1:
        raise KeyError("rank 1 failed")
    return rank


def wrapped_messages(rank: int, world_size: int) -> list[str | None]:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    ddp = DistributedDataParallel(make_mlp())
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    sharded = fully_shard(make_mlp(), mesh=mesh)
    return [wrapped_model_message(m) for m in (ddp, sharded, ddp.module, make_mlp())]


X = torch.randn(6, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)


def gradient_of(loss_fn, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Plain torch, one process: the gradient of loss_fn on x, zeros where there is none."""
    torch.manual_seed(0)
    model = make_mlp()
    loss = loss_fn(model, x)
    if loss is not None:  # None: the step ran backward itself
        loss.backward()
    return {
        name: torch.zeros_like(p) if p.grad is None else p.grad
        for name, p in model.named_parameters()
    }


def relative_errors(got, want) -> dict[str, float]:
    errors = {}
    for name in want:
        scale = max(got[name].norm().item(), want[name].norm().item())
        errors[name] = (
            0.0 if scale == 0 else (got[name] - want[name]).norm().item() / scale
        )
    return errors


# -- the silent case ---------------------------------------------------------------------
def test_r1_alone_under_ddp_is_not_synchronized_then_raises():
    halves = [gradient_of(r1, half) for half in X.chunk(2)]
    one_process = {name: (halves[0][name] + halves[1][name]) / 2 for name in halves[0]}
    # Each rank keeps its own half's gradient: the largest error over the ranks.
    expected = {
        name: max(relative_errors(half, one_process)[name] for half in halves)
        for name in one_process
    }
    assert max(expected.values()) > 0.1  # the case is not trivially synchronized

    report = check_distributed(make_mlp, r1, X, world_size=2, timeout=TIMEOUT)

    assert report.verdict == "raises" and not report.ok
    first, second = report.steps
    assert first.kind == "not synchronized"
    for name, error in expected.items():
        assert first.errors[name] == pytest.approx(error, rel=1e-6, abs=1e-12)
    assert second.kind == "raises"
    assert second.message == (
        "RuntimeError: Expected to have finished reduction in the prior iteration "
        "before starting a new one."
    )
    assert report.without_gradient == ["2.bias"]  # d(out)/dx does not depend on it
    assert "synchronized_gradients" in report.fix and "0 * out.sum()" in report.fix
    assert str(report).startswith("make_mlp + r1, DDP on 2 processes: raises\n")


# -- the other rows and the fixes, in one launch -------------------------------------------
@pytest.fixture(scope="module")
def reports() -> dict[str, object]:
    cases = {
        "find_unused": Case(
            make_mlp, r1, (X,), "ddp", {"find_unused_parameters": True}
        ),
        "static_graph": Case(make_mlp, r1, (X,), "ddp", {"static_graph": True}),
        "critic_loss": Case(make_mlp, r1_with_critic_loss, (X,)),
        "ddp_synchronized": Case(make_mlp, r1_synchronized, (X,)),
        "x_grad": Case(make_mlp, backward_then_x_grad, (X,)),
        "fsdp": Case(make_mlp, r1, (X,), "fsdp"),
        "fsdp_no_reshard": Case(
            make_mlp, r1, (X,), "fsdp", {"reshard_after_forward": False}
        ),
        "fsdp_synchronized": Case(make_mlp, r1_synchronized, (X,), "fsdp"),
        "broken": Case(make_mlp, raises_everywhere, (X,)),
    }
    return dict(
        zip(cases, check_cases(list(cases.values()), 2, timeout=TIMEOUT), strict=True)
    )


@pytest.mark.parametrize("name", ["find_unused", "static_graph"])
def test_ddp_options_do_not_synchronize_r1(reports, name):
    report = reports[name]
    assert report.steps[0].kind == "not synchronized"
    assert max(report.steps[0].errors.values()) > 0.1


@pytest.mark.parametrize(
    "name", ["critic_loss", "ddp_synchronized", "fsdp_synchronized"]
)
def test_fixed_steps_are_synchronized(reports, name):
    report = reports[name]
    assert report.verdict == "synchronized" and report.ok
    assert [step.kind for step in report.steps] == ["synchronized", "synchronized"]
    assert set(report.steps[0].errors.values()) == {0.0}


def test_synchronized_gradients_leaves_a_plain_module_alone(reports):
    # So the same step runs in one process, where the checker computes its reference.
    halves = [gradient_of(r1, half) for half in X.chunk(2)]
    in_one_process = [gradient_of(r1_synchronized, half) for half in X.chunk(2)]
    for plain, synchronized in zip(halves, in_one_process, strict=True):
        for name in plain:
            torch.testing.assert_close(synchronized[name], plain[name])
    assert reports["ddp_synchronized"].ok


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("x_grad", "RuntimeError: a leaf Variable that requires grad is being used in an "
                   "in-place operation."),
        ("fsdp", "RuntimeError: setStorage: sizes [3, 8], strides [1, 3], storage offset "
                 "0, and itemsize 8 requiring a storage size of 192 are out of bounds for "
                 "storage of size 0"),
        ("fsdp_no_reshard", "RuntimeError: setStorage: sizes [3, 8]"),
    ],
)  # fmt: skip
def test_raising_rows_report_the_first_sentence_and_a_fix(reports, name, message):
    report = reports[name]
    assert report.verdict == "raises"
    assert report.steps[-1].message.startswith(message)
    assert "synchronized_gradients" in report.fix


def test_a_step_broken_in_one_process_is_said_so(reports):
    report = reports["broken"]
    assert report.verdict == "raises in one process"
    assert report.steps[0].message == "ValueError: this step is broken"
    assert "check_model" in report.fix


def test_check_model_message_for_wrapped_models():
    ddp, sharded, inner, plain = launch(wrapped_messages, 2, timeout=TIMEOUT)[0]
    assert "DistributedDataParallel" in ddp and "check_distributed" in ddp
    assert "fully_shard" in sharded and "check_distributed" in sharded
    assert inner is None and plain is None


# -- the launcher -------------------------------------------------------------------------
def test_two_launches_at_once_do_not_collide():
    results: list[object] = [None, None]

    def run(index: int) -> None:
        results[index] = launch(all_reduce_rank, 2, timeout=TIMEOUT)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT + 10)
    assert results == [[3.0, 3.0], [3.0, 3.0]]


def test_a_rank_that_hangs_is_killed_at_the_timeout():
    start = time.monotonic()
    with pytest.raises(LaunchTimeout, match="ranks 0, 1 had not finished after 8 s"):
        launch(sleeps, 2, timeout=8.0)
    assert time.monotonic() - start < 30


def test_a_rank_error_is_raised_in_the_caller():
    with pytest.raises(KeyError, match="rank 1 failed"):
        launch(raises_on_rank_1, 2, timeout=TIMEOUT)


# -- refused input, no process started -------------------------------------------------------
def test_a_lambda_is_refused_with_what_to_pass():
    with pytest.raises(
        TypeError, match="make_model=.*<lambda> is a lambda.*top level of a module"
    ):
        check_distributed(lambda: make_mlp(), r1, X)


def test_a_local_function_is_refused():
    def penalty(model, x):
        return r1(model, x)

    with pytest.raises(TypeError, match="defined inside another"):
        check_distributed(make_mlp, penalty, X)


def test_a_function_of_main_is_refused():
    def penalty(model, x):
        return r1(model, x)

    penalty.__module__ = "__main__"  # as in a script, a notebook or a gallery page
    penalty.__qualname__ = "penalty"
    with pytest.raises(TypeError, match="defined in __main__.*move it to a module"):
        check_distributed(make_mlp, penalty, X)


def test_a_script_without_a_main_guard_can_launch(tmp_path):
    # multiprocessing's spawn would re-run such a script in every process and fail; the
    # ranks here import only the task, as in sphinx-gallery or a downloaded page.
    import subprocess

    script = tmp_path / "script.py"
    script.write_text(
        "from double_backward.distributed import launch\n"
        "from tests.test_distributed import all_reduce_rank\n"
        f"print(launch(all_reduce_rank, 2, timeout={TIMEOUT}))\n"
    )
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join(p or os.getcwd() for p in sys.path)
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env,
        timeout=TIMEOUT + 30,
    )  # fmt: skip
    assert done.stdout == "[3.0, 3.0]\n", done.stderr


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"wrapper": "deepspeed"}, ValueError, "wrapper must be one of"),
        ({"world_size": 4}, ValueError, "split into 4 equal shares"),
        ({"world_size": 0}, ValueError, "world_size must be a positive int"),
        ({"steps": 0}, ValueError, "steps must be a positive int"),
    ],
)
def test_bad_arguments_are_refused(kwargs, error, match):
    with pytest.raises(error, match=match):
        check_distributed(make_mlp, r1, X, **kwargs)


class NeedsTwoArguments(Exception):
    def __init__(self, what: str, where: int) -> None:
        super().__init__(f"{what} on rank {where}")


def raises_unrebuildable(rank: int, world_size: int) -> None:
    raise NeedsTwoArguments("broken", rank)


def test_an_error_that_cannot_be_rebuilt_arrives_as_its_text():
    with pytest.raises(
        RuntimeError, match="rank 0: NeedsTwoArguments: broken on rank 0"
    ):
        launch(raises_unrebuildable, 2, timeout=TIMEOUT)


def test_ddp_create_graph_warning_is_captured_whole(monkeypatch):
    # The page quotes this warning as a rank logs it; torch logs it only at this level.
    from double_backward.distributed import launch, steps

    monkeypatch.setenv("TORCH_CPP_LOG_LEVEL", "WARNING")
    logged = launch(steps.create_graph_warnings, world_size=2, timeout=120.0)[0]
    (warning, *_) = [line for line in logged if "DistributedDataParallel with create_graph" in line]
    text = " ".join(warning.split())
    assert "is not well-supported" in text
    assert "The higher-order gradient will not be synchronized across ranks" in text
    assert "backpropagation through all_reduce operations will not occur" in text
