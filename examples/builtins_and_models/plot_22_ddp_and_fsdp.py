r"""
Double backward under DDP and FSDP
==================================

A gradient penalty (R1, WGAN-GP), MAML or a physics-informed loss differentiates a gradient.
PyTorch warns that ``DistributedDataParallel`` with
``create_graph=True`` "is not well-supported", and says why (its whole warning, as this build's
run logged it, is printed below). This page shows what happens, each case run
live at build time: real ``torch.distributed`` with the ``gloo`` backend, two processes on
this machine's loopback interface, each given half of an 8-sample batch. Every rank's gradient
is compared with one process's on the whole batch: the mean over the two halves of each
half's gradient, which is what DDP's averaging all-reduce must give.

The most common pattern, an R1 penalty step on its own (lazy regularisation), runs without
an error under DDP and leaves each rank with its own half's gradient; the next step raises.
Under FSDP2 (``fully_shard``) the penalty raises at once. Each failing case is followed by a
fix measured the same way. :func:`double_backward.check_distributed` runs the same check on
your own model and penalty.
"""

# %%
# The critic and its R1 penalty
# -----------------------------
# The processes are spawned, so each imports the code it runs by name: the training steps
# live in ``double_backward.distributed.steps``, not on this page (a function defined in
# a notebook cannot be imported by a new process). This is the penalty step, as a
# lazy-regularisation step writes it. The critic is a Tanh MLP, 4 -> 16 -> 16 -> 1, in
# float64 so that rounding stays far below every difference shown.
import inspect

import torch

from double_backward.distributed import steps

print(inspect.getsource(steps.r1_penalty))
print(f"torch {torch.__version__.split('+')[0]}, gloo, 2 processes on 127.0.0.1")

# %%
# What torch warns
# ----------------
# torch logs its DDP warning from C++, to standard error, and only when the environment
# variable ``TORCH_CPP_LOG_LEVEL`` is ``WARNING`` or lower as a process starts (the ranks
# inherit this process's environment). Here is the warning as a rank logged it, whole:
import os
import textwrap

from double_backward.distributed import launch

level = os.environ.get("TORCH_CPP_LOG_LEVEL")
os.environ["TORCH_CPP_LOG_LEVEL"] = "WARNING"
try:
    logged = launch(steps.create_graph_warnings, world_size=2, timeout=120.0)[0]
finally:
    os.environ.pop("TORCH_CPP_LOG_LEVEL")
    if level is not None:
        os.environ["TORCH_CPP_LOG_LEVEL"] = level
warning = next(line for line in logged if "DistributedDataParallel with create_graph" in line)
# torch's text, word for word: its doubled spaces made single, wrapped to fit the page.
print(textwrap.fill(" ".join(warning.split("] ", 1)[1].split()), width=72))

# %%
# R1 on its own under DDP: not synchronized, then an error
# --------------------------------------------------------
# :func:`~double_backward.check_distributed` runs the step twice on each rank, with the model
# in ``DistributedDataParallel``, and compares the gradients after each step. After step 1,
# each rank holds its own half's gradient: nothing was all-reduced, and nothing said so.
# Step 2 raises. The report's last line but one names the cause: the penalty gives the last
# layer's bias no gradient (the gradient of the output with respect to ``x`` does not depend
# on it), and DDP all-reduces only once every parameter has received its gradient.
from double_backward import check_distributed

x = steps.batch()
r1_alone = check_distributed(steps.make_critic, steps.r1_penalty, x, world_size=2, wrapper="ddp")
print(r1_alone)
assert [step.kind for step in r1_alone.steps] == ["not synchronized", "raises"]

# %%
# Every other case, in one launch
# -------------------------------
# Starting two processes costs seconds, so the remaining cases share one launch:
# :func:`~double_backward.distributed.check_cases` runs a list of them, each on a fresh
# model and wrapper. Each section below prints one of these reports.
from double_backward.distributed import check_cases, results

print(inspect.getsource(results.cases))
cases = results.cases(x)
reports = dict(zip(cases, check_cases(list(cases.values()), world_size=2), strict=True))
print(f"{len(reports)} cases checked")
# What the sections below say, checked here so that a torch release changing it fails the build.
fixed = ["no_last_bias", "critic_loss", "zero_loss", "synchronized", "x_grad_synchronized"]
assert all(reports[name].ok for name in [*fixed, "maml", "fsdp_synchronized"])
assert all(reports[name].verdict == "raises" for name in ["x_grad", "fsdp", "fsdp_no_reshard"])
assert reports["find_unused"].steps[1].kind == "raises"
assert {step.kind for step in reports["static_graph"].steps} == {"not synchronized"}

# %%
# Every case at a glance
# ----------------------
# One row per case, one cell per step: what each step did on the two ranks, as the reports
# above and below print it.
import matplotlib.pyplot as plt

# sphinx_gallery_thumbnail_number = 1
colours = {"synchronized": "#4c9f70", "not synchronized": "#e6a23c"}
rows = {"r1_alone": r1_alone, **reports}
figure, axes = plt.subplots(figsize=(6, 0.32 * len(rows) + 1), layout="constrained")
for row, report in enumerate(rows.values()):
    for column, step in enumerate(report.steps):
        colour = "#d9534f" if step.kind.startswith("raises") else colours[step.kind]
        axes.add_patch(plt.Rectangle((column, row), 0.95, 0.9, color=colour))
        axes.text(column + 0.47, row + 0.45, step.kind, ha="center", va="center", fontsize=8)
    if len(report.steps) == 1:  # step 1 raised: no step 2 ran
        axes.text(1.47, row + 0.45, "not run", ha="center", va="center", fontsize=8, color="0.4")
axes.set(xlim=(0, 2), ylim=(len(rows), 0), xticks=[0.47, 1.47], xticklabels=["step 1", "step 2"])
axes.set_yticks([row + 0.45 for row in range(len(rows))], list(rows))
axes.tick_params(length=0)
axes.set_title("What each step did under DDP and FSDP (two ranks)")
plt.show()

# %%
# DDP's options do not help
# -------------------------
# ``find_unused_parameters=True`` looks for parameters the *forward* pass did not use; the
# last bias was used there, so DDP still waits for its gradient, and step 2 raises again.
# ``static_graph=True`` raises nothing, and never synchronizes: it is silent at every step.
print(reports["find_unused"])
print(reports["static_graph"])

# %%
# The cause, shown: a critic whose penalty reaches every parameter
# ----------------------------------------------------------------
# The same R1 step on the same critic without the last layer's bias (the only parameter the
# penalty does not reach) is synchronized at both steps. So the trouble is not
# ``create_graph=True`` itself: DDP all-reduces the penalty's gradients like any others,
# provided each parameter gets one.
print(reports["no_last_bias"])

# %%
# Fix 1: the penalty in the same backward as a loss that uses every parameter
# ---------------------------------------------------------------------------
# A step that adds R1 to the critic's own loss is synchronized. A penalty step on its own
# can add ``0 * out.sum()``: it changes no gradient, and gives every parameter one.
print(inspect.getsource(steps.r1_plus_zero_loss))
print(reports["critic_loss"])
print(reports["zero_loss"])

# %%
# Fix 2: ``no_sync()`` and an explicit all-reduce
# -----------------------------------------------
# :func:`~double_backward.distributed.synchronized_gradients` runs the step inside
# ``no_sync()``, then all-reduces and averages
# each gradient itself. It works whatever the step does, and costs one all-reduce per
# parameter instead of DDP's bucketed, overlapped ones.
print(inspect.getsource(steps.r1_synchronized))
print(reports["synchronized"])

# %%
# ``out.backward(create_graph=True)``, then a penalty on ``x.grad``
# -----------------------------------------------------------------
# Computing the input gradient with ``backward`` rather than :func:`torch.autograd.grad`
# also accumulates the parameters' gradients, with a graph; under DDP that backward raises
# (in one process the same step runs: the report's comparison computed it). Inside
# ``synchronized_gradients`` the same step runs and is synchronized (the gradient compared
# includes the first backward's share, as in one process).
print(inspect.getsource(steps.penalty_on_x_grad))
print(reports["x_grad"])
print(reports["x_grad_synchronized"])

# %%
# MAML: synchronized as it is
# ---------------------------
# A MAML-style step takes ``grad(inner_loss, params, create_graph=True)`` and differentiates
# the loss of the adapted parameters. The outer gradient reaches every parameter, so DDP
# all-reduces it: synchronized at both steps, with no change.
print(inspect.getsource(steps.maml_step))
print(reports["maml"])

# %%
# FSDP2: the penalty raises
# -------------------------
# With every layer and the model passed to ``fully_shard``, R1 raises in its second
# backward, and so does ``reshard_after_forward=False``.
print(reports["fsdp"])
print(reports["fsdp_no_reshard"])

# %%
# Why: the unsharded weights are freed after the first backward
# -------------------------------------------------------------
# ``double_backward.distributed.probes.unsharded_storage`` follows the first layer's
# unsharded weight (the tensor its forward computed with, 16 x 4 in float64: 512 bytes)
# through an R1 step on each rank. By default its storage is freed after the forward pass and
# again after the first backward; with ``reshard_after_forward=False`` it survives the
# forward but not the first backward. The second backward reads it there, hence
# ``setStorage ... storage of size 0``. Inside ``synchronized_gradients`` it is kept.
from double_backward.distributed import launch
from double_backward.distributed.probes import unsharded_storage

storage = launch(unsharded_storage, 2)
assert storage[0] == storage[1]  # both ranks saw the same
print(f"{'':30} {'after forward':>14} {'after grad':>11}  second backward")
for setting, seen in storage[0].items():
    print(
        f"{setting:30} {seen['after forward']:>12} B {seen['after grad']:>9} B  "
        f"{seen['second backward']}"
    )

# %%
# The fix for FSDP: keep the step unsharded, then average
# -------------------------------------------------------
# ``synchronized_gradients`` on a ``fully_shard``-ed model keeps its parameters unsharded
# until the step ends (``set_reshard_after_backward(False)`` and no reduce-scatter),
# averages the full gradients, reshards, and puts each rank's shard in ``.grad``. The step
# holds the whole unsharded model, the memory FSDP saves the rest of the time.
print(reports["fsdp_synchronized"])

# %%
# The results, per torch release
# ------------------------------
# Every row measured on this page, from the reports above, with the torch release printed
# beside them. The same table was measured on other torch releases too; the last lines say, for
# each, whether its table is the same as this one.
reports["r1_alone"] = r1_alone
live = results.table(reports)
release = torch.__version__.split("+")[0]
print(f"torch {release}, CPU, gloo, 2 processes, 8 samples")
print(f"{'the step':33}{'under':6}{'step 1':35}step 2")
for label, wrapper, _ in results.ROWS:
    step_1, *rest = live[f"{label.strip()} ({wrapper})"]
    print(f"{label:33}{wrapper:6}{step_1:35}{rest[0] if rest else '-'}")

# sphinx_gallery_start_ignore
# The other releases' tables are kept with the site's sources, so this part runs in a build and
# is left out of the page and its downloads. The build fails when the live table differs from
# the one kept for the same release.
import json  # noqa: E402
from pathlib import Path  # noqa: E402

kept = [
    json.loads(path.read_text(encoding="utf-8"))
    for path in sorted(Path("..", "docs", "_data", "distributed").glob("torch-*.json"))
]
for data in kept:
    same = data["results"] == live
    if data["torch"] == release:
        assert same, f"the live table differs from the one kept for torch {release}"
    differing = [cell for cell in live if data["results"].get(cell) != live[cell]]
    print(f"torch {data['torch']} (measured {data['measured'][:10]}): "
          + ("the same table" if same else "differs in " + "; ".join(differing)))
# sphinx_gallery_end_ignore

# %%
# Conclusion
# ----------
# Under DDP, a step's gradients are all-reduced only when every parameter receives one in
# the backward DDP watches. A gradient penalty on its own misses some (here the last bias), so
# each rank trains on its own gradient for one step, silently, then fails. Add the penalty to a
# loss that uses every parameter (the critic loss, or ``0 * out.sum()``), or average the
# gradients with :func:`~double_backward.distributed.synchronized_gradients`.
#
# Under FSDP2, the penalty needs the unsharded weights after the first backward: keep them for
# the step with ``synchronized_gradients``.
#
# Next
# ----
# To check your own model and penalty: ``double_backward.check_distributed(make_model, penalty,
# inputs, world_size=2, wrapper="ddp")``, with ``make_model`` and ``penalty`` defined in a
# module. For the model alone in one process: :func:`double_backward.check_model`
# (:doc:`/auto_examples/builtins_and_models/plot_14_builtins_without_double_backward`); the
# applications these penalties come
# from: :doc:`/auto_examples/builtins_and_models/plot_15_applications`.
