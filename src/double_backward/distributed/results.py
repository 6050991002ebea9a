"""The cases the page "Double backward under DDP and FSDP" runs, and its table of results.

The table is kept per torch release, as the compatibility matrix is: the page computes it
live with the installed torch, and ``nox -s matrix -- 2.14.1`` writes it for another release
into ``docs/_data/distributed/torch-<release>.json`` (through :func:`measure`). The page
shows every release's table and fails its build when the live one differs from the one
committed for the same release.
"""

from __future__ import annotations

from .check import Case, DistributedReport, Step, check_cases
from .steps import (
    batch,
    critic_loss_and_r1,
    make_critic,
    make_critic_without_last_bias,
    maml_step,
    penalty_on_x_grad,
    penalty_on_x_grad_synchronized,
    r1_penalty,
    r1_plus_zero_loss,
    r1_synchronized,
)

#: The table's rows: (what the step does, under which wrapper, the case's name).
ROWS: tuple[tuple[str, str, str], ...] = (
    ("R1 on its own (lazy R1)", "DDP", "r1_alone"),
    ("  find_unused_parameters=True", "DDP", "find_unused"),
    ("  static_graph=True", "DDP", "static_graph"),
    ("  critic without the last bias", "DDP", "no_last_bias"),
    ("critic loss + R1, one backward", "DDP", "critic_loss"),
    ("R1 + 0 * out.sum()", "DDP", "zero_loss"),
    ("R1 in synchronized_gradients", "DDP", "synchronized"),
    ("backward(create_graph) + x.grad", "DDP", "x_grad"),
    ("  in synchronized_gradients", "DDP", "x_grad_synchronized"),
    ("MAML-style", "DDP", "maml"),
    ("R1 on its own", "FSDP", "fsdp"),
    ("  reshard_after_forward=False", "FSDP", "fsdp_no_reshard"),
    ("R1 in synchronized_gradients", "FSDP", "fsdp_synchronized"),
)


def cases(x) -> dict[str, Case]:
    """Every case of the table but ``r1_alone`` (the page runs that one on its own), on the
    batch ``x``, by name."""
    return {
        "find_unused": Case(
            make_critic, r1_penalty, (x,), "ddp", {"find_unused_parameters": True}
        ),
        "static_graph": Case(
            make_critic, r1_penalty, (x,), "ddp", {"static_graph": True}
        ),
        "no_last_bias": Case(make_critic_without_last_bias, r1_penalty, (x,)),
        "critic_loss": Case(make_critic, critic_loss_and_r1, (x,)),
        "zero_loss": Case(make_critic, r1_plus_zero_loss, (x,)),
        "synchronized": Case(make_critic, r1_synchronized, (x,)),
        "x_grad": Case(make_critic, penalty_on_x_grad, (x,)),
        "x_grad_synchronized": Case(make_critic, penalty_on_x_grad_synchronized, (x,)),
        "maml": Case(make_critic, maml_step, (x,)),
        "fsdp": Case(make_critic, r1_penalty, (x,), "fsdp"),
        "fsdp_no_reshard": Case(
            make_critic, r1_penalty, (x,), "fsdp", {"reshard_after_forward": False}
        ),
        "fsdp_synchronized": Case(make_critic, r1_synchronized, (x,), "fsdp"),
    }


def outcome(step: Step) -> str:
    """One step's cell: the error's first words, the largest relative error, or the verdict."""
    if step.kind == "raises":
        return "raises " + step.message.split(": ", 1)[-1][:22] + "..."
    if step.kind == "not synchronized":
        return f"silent, error {max(step.errors.values()):.2f}"
    return step.kind


def table(reports: dict[str, DistributedReport]) -> dict[str, list[str]]:
    """The table's cells: ``"<row> (<wrapper>)"`` -> one outcome per step."""
    return {
        f"{label.strip()} ({wrapper})": [outcome(step) for step in reports[name].steps]
        for label, wrapper, name in ROWS
    }


def measure() -> dict[str, list[str]]:
    """The table on the installed torch: every case in one launch of two processes."""
    x = batch()
    named = {"r1_alone": Case(make_critic, r1_penalty, (x,)), **cases(x)}
    reports = check_cases(list(named.values()), world_size=2)
    return table(dict(zip(named, reports, strict=True)))


__all__ = ["ROWS", "cases", "measure", "outcome", "table"]
