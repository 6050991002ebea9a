r"""
What it costs
=============

Saving an input, saving an output, returning intermediates as extra outputs, recomputing in
backward: each way of writing a double-differentiable Function has a price in time and memory.
This page measures every Function of the package against the native op it reimplements: the
time of a double backward, custom / native, and the bytes each one keeps for backward.

The bytes are counted live while the page is built (they are exact and the same on every
machine). The times come from a benchmark run committed with the package, since timing on a
shared build machine would be noise; the page names that machine and says how to measure yours.
You will see why ``Square`` beats ``x**2``, why materialised zero gradients cost ``Sinh`` time
and can turn an overflow into ``nan``, and when recomputing is the better trade.
(The plots are drawn by :mod:`double_backward.cost_plots` with matplotlib, which the
package's ``plots`` extra installs.)
"""

# %%
# The measurements and their machine
# ----------------------------------
# ``benchmarks/functions.py`` times, for each case, one *double backward* (forward, a
# ``create_graph=True`` backward, and the backward of that: what a gradient penalty or a
# Hessian-vector product runs) and one forward + backward. A double backward is timed in two
# cases: with a plain incoming gradient ``grad_out`` (a tensor that does not require grad, the
# special case of a Hessian-vector product of ``f`` alone), and with a ``grad_out`` that
# requires grad, the second backward reaching it too
# (:func:`~double_backward.costs.penalty_double_backward`): the case of a gradient penalty or a
# composed loss, where the incoming gradient is computed from the parameters. The custom
# Function and its native op run back to back in each round, in this process's CPU time, and
# the figure is the median of the per-round ratios. glibc's mmap threshold is fixed, so that
# large allocations cost the same fresh pages in every run. Regenerate with
# ``nox -s bench_functions`` (it rewrites ``src/double_backward/measurements/functions.json``),
# then rebuild the docs.
from double_backward.costs import load_measurements

measurements = load_measurements()
machine, settings = measurements["machine"], measurements["settings"]
print(f"measured:  {measurements['date']}")
print(f"machine:   {machine['cpu']}, {machine['cores']} cores, shared with other users")
print(f"software:  Python {machine['python']}, torch {machine['torch']}, "
      f"NumPy {machine['numpy']}")
print(f"load avg:  {machine['load_average_start']} at start, "
      f"{machine['load_average_end']} at end (1, 5, 15 min)")
sizes = ", ".join(f"{size:.0e}" for size in settings["sizes"])
print(f"settings:  {settings['dtype']}, {settings['threads']} thread, "
      f"median of {settings['rounds']} paired rounds")
print(f"sizes:     {sizes} elements")
print(f"malloc:    MALLOC_MMAP_THRESHOLD_={settings['malloc_mmap_threshold']}")
print(f"GPU:       {machine['cuda']}")

# %%
# What each Function keeps for backward
# -------------------------------------
# :func:`~double_backward.costs.saved_tensors` records every tensor packed for backward with
# :class:`torch.autograd.graph.saved_tensors_hooks`, one entry per storage. An *input* or the
# *output* costs nothing extra while the caller holds it; one the caller drops stays alive for
# backward (measured in the next section); an *extra* tensor lives only for backward. The last
# column is what the ``create_graph=True`` backward saves anew for the
# second backward. Bytes per element of a float32 input.
import torch

from double_backward.costs import CASES, saved_tensors

n = 100_000
x = torch.randn(n)
saved = {case.name: saved_tensors(case.custom, x) for case in CASES}
print(f"{'Function':<28} {'saved by forward':<22} {'extra B/elt':>11} {'new B/elt':>9}")
for name, report in saved.items():
    roles = ", ".join(s.role for s in report.forward)
    print(f"{name:<28} {roles:<22} {report.extra_bytes / n:>11.0f} "
          f"{report.new_in_backward_bytes / n:>9.0f}")

# %%
# The native ops, for comparison: ``x**2`` and ``x**3`` save their input, :func:`torch.exp`
# its output, :func:`torch.sinh` its input. None saves an extra tensor.
natives = {case.native_name: case.native for case in CASES}
for name, native in natives.items():
    report = saved_tensors(native, x)
    roles = ", ".join(s.role for s in report.forward)
    print(f"{name:<28} {roles:<22} {report.extra_bytes / n:>11.0f} "
          f"{report.new_in_backward_bytes / n:>9.0f}")

# %%
# Saving an input the caller drops
# --------------------------------
# An input costs nothing extra only while the caller holds it. In ``y = f(g(x))`` the caller
# keeps ``x`` and ``y``, not ``g(x)``: if ``f`` saves its input, the graph keeps ``g(x)`` alive
# until backward, where it would have been freed at once. Here ``g(x) = 2x`` saves nothing,
# and the count is the bytes of the tensors the graph saved that the caller does not hold
# (counted as above, per storage: exact, the same on every machine).
from double_backward import Exp, Square


def kept_beyond_caller(step):
    """Bytes the graph saves that the caller's tensors do not hold, per float32 element."""
    saved = {}

    def pack(tensor):
        saved[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    leaf = x.detach().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        held = step(leaf)  # what the caller keeps
    held_storages = {tensor.untyped_storage().data_ptr() for tensor in held}
    return sum(b for ptr, b in saved.items() if ptr not in held_storages) / n


def holds(f):
    return lambda leaf: (leaf, h := leaf * 2, f(h))  # the caller keeps g(x) too


def drops(f):
    return lambda leaf: (leaf, f(leaf * 2))  # the caller keeps x and y only


print(f"{'kept for backward, B/elt':<32}{'caller holds g(x)':>18}{'drops g(x)':>12}")
for label, f in [("Square (saves its input)", Square.apply),
                 ("native (2x)**2 (saves its input)", lambda t: t**2),
                 ("Exp (saves its output)", Exp.apply)]:
    print(f"{label:<32}{kept_beyond_caller(holds(f)):>18.0f}"
          f"{kept_beyond_caller(drops(f)):>12.0f}")

# %%
# So saving an input is free only where the caller keeps it anyway; saving the output is free
# either way, since the caller holds ``y`` to use it.

# %%
# Saved bytes, drawn
# ------------------
# The same numbers as bars. ``Sinh`` keeps its two halved exponentials (8 bytes per element
# beyond the input); the tutorial's form and the materialised variant also make the first
# backward save two tensors of zeros for the second.
import matplotlib.pyplot as plt

from double_backward.cost_plots import saved_bytes_figure

saved_bytes_figure({
    name: (report.extra_bytes / n, report.new_in_backward_bytes / n)
    for name, report in saved.items()
})
plt.show()

# %%
# Time against size
# -----------------
# Double backward, custom / native, at each size: below the dotted line the custom Function is
# the faster. The band spans the middle half of the rounds. At small sizes every call is mostly
# Python and dispatch, where a custom Function pays for ``apply``; from about 1e5 elements the
# kernels and their memory traffic decide. (The ``setup_context`` versions are in the tables.)

from double_backward.cost_plots import time_against_size_figure
from double_backward.costs import time_series

# sphinx_gallery_thumbnail_number = 2
times = measurements["devices"]["cpu"]["times"]
size_labels = "".join(f"{size:>8.0e}" for size in settings["sizes"])


def ratio_row(name: str) -> str:
    """A case's double backward time, custom / native, at each size."""
    ratios = time_series(times, name)[1]
    return f"{name:<28}" + "".join(f"{ratio:>8.2f}" for ratio in ratios)


time_against_size_figure(times, {
    "The package's Functions": ["Square", "Exp", "Sinh", "Cube (NumPy backward)", "Sin",
                                "Cos"],
    "Ways to write sinh": ["Sinh", "Sinh, before: out of place", "Sinh, tutorial form",
                           "Sinh, zeros materialised", "Sinh, recompute in backward",
                           "Sinh, native ops inside"],
})
plt.show()

# %%
# The targets
# -----------
# The project's targets, at 1e6 elements: double backward at most 1.0× native for ``Square``,
# 1.15× for ``Exp``, 1.25× for ``Cube`` with its NumPy backward and 1.5× for ``Sinh``; extra
# saved tensors 0, 0, 0 and 2. Times from the committed run, saved tensors counted now. Each
# time target is shown for both cases: *plain* ``grad_out`` (it does not require grad) and
# ``grad_out`` *requiring grad* (a penalty or a composed loss).
def ratios_at_target(kind):
    return {
        r["case"]: r["ratio"]
        for r in times
        if r["size"] == settings["target_size"] and r["kind"] == kind
    }


time_at_target = ratios_at_target("double_backward")
penalty_at_target = ratios_at_target("penalty_double_backward")
for case in CASES:
    if case.time_target is None:
        continue
    extra_count = len(saved[case.name].extra)
    for label, ratio in (("plain grad_out", time_at_target[case.name]),
                         ("grad_out requiring grad", penalty_at_target[case.name])):
        time_mark = "met" if ratio <= case.time_target else "MISSED"
        print(f"{case.name:<22} {label:<24} time {ratio:.2f}x "
              f"(<= {case.time_target:.2f}: {time_mark})")
    saved_mark = "met" if extra_count == case.extra_saved_target else "MISSED"
    print(f"{case.name:<22} extra tensors {extra_count} "
          f"(= {case.extra_saved_target}: {saved_mark})")

# %%
# Why ``Square`` beats ``x**2``
# -----------------------------
# :func:`~double_backward.costs.backward_ops` lists the kernels each backward runs.
# ``x**2`` is :func:`torch.pow`, whose derivative formula is written for any exponent,
# ``grad · 2 · x.pow(1)``: its double backward differentiates a ``pow`` again. ``Square``'s
# backward is ``grad_out * 2 * x``, two multiplications whose own derivative is one more.
from double_backward import Square
from double_backward.costs import aten_ops, backward_ops, ops_listing


def show_ops(label, ops):
    print(ops_listing(label, ops))


for name, fn in (("Square", Square.apply), ("x**2", lambda t: t**2)):
    first, second = backward_ops(fn, torch.randn(4))
    show_ops(f"{name}, first backward", first)
    show_ops(f"{name}, second backward", second)

# %%
# Fewer kernels means less memory traffic: at 1e6 elements ``Square`` takes
# a fraction of ``x**2``'s double backward time, as the plot showed. With a ``grad_out`` that
# requires grad, the second backward also differentiates with respect to ``grad_out``, one
# more product on each side:
for name, fn in (("Square", Square.apply), ("x**2", lambda t: t**2)):
    show_ops(f"{name}, second, grad_out req. grad",
             backward_ops(fn, torch.randn(4), grad_out_requires_grad=True)[1])
for name in ("Square", "Square (setup_context)"):
    print(f"{name:<24} double backward at 1e6: plain grad_out {time_at_target[name]:.2f}x, "
          f"grad_out requiring grad {penalty_at_target[name]:.2f}x x**2")

# %%
# ``Cube``: no gradient for an input that needs none
# --------------------------------------------------
# ``Cube``'s backward is :class:`~double_backward.CubeBackward`, which has two inputs,
# ``grad_out`` and ``x``. In a plain double backward ``grad_out`` does not require grad, so
# ``CubeBackward.backward`` checks ``ctx.needs_input_grad`` and skips the term
# :math:`3x^2\,\bar{g}` (a ``pow`` and two ``mul``) that autograd would throw away. The
# ``setup_context`` version still computes both; their times, custom / ``x**3``, follow.
from double_backward import Cube
from double_backward.functions.setup_context_style import Cube as CubeSetupContext

for name, fn in (
    ("Cube", Cube.apply),
    ("setup_context Cube", CubeSetupContext.apply),
):
    show_ops(f"{name}, second backward", backward_ops(fn, torch.randn(4))[1])
print(f"\n{'':<28}{size_labels}")
for name in ("Cube (NumPy backward)", "Cube (setup_context)"):
    print(ratio_row(name))

# %%
# That saving is the special case's. In a gradient penalty or a composed loss ``grad_out``
# requires grad, ``needs_input_grad`` says so, and ``Cube`` computes the term too: its second
# backward runs as many kernels as ``x**3``'s, and its time ratio rises (committed run, with a
# ``grad_out`` that requires grad):
for name, fn in (("Cube", Cube.apply), ("x**3", lambda t: t**3)):
    ops_in_penalty = backward_ops(fn, torch.randn(4), grad_out_requires_grad=True)[1]
    show_ops(f"{name}, second, grad_out req. grad", ops_in_penalty)
print(f"\n{'':<28}{size_labels}")
for name in ("Cube (NumPy backward)", "Cube (setup_context)"):
    ratios = time_series(times, name, "penalty_double_backward")[1]
    print(f"{name:<28}" + "".join(f"{ratio:>8.2f}" for ratio in ratios))

# %%
# Why materialised zeros cost ``Sinh`` time
# -----------------------------------------
# :class:`~double_backward.functions.sinh_variants.SinhTutorial` is the tutorial's form: it
# returns :math:`e^{x}` and :math:`e^{-x}` as extra outputs but leaves
# ``set_materialize_grads`` at its default, so autograd hands backward a tensor of zeros for
# each extra output nobody used, and backward multiplies them in. (Under ``torch.compile``
# the package's ``Sinh`` gets zeros too: :doc:`plot_19_torch_compile`.)
#
# .. literalinclude:: /../src/double_backward/functions/sinh_variants.py
#    :pyobject: SinhTutorial
#
# Its first backward allocates two ``zeros`` and runs two products of nothing; the package's
# :class:`~double_backward.Sinh` (``set_materialize_grads(False)``) gets ``None`` and skips
# them. The second backward sends gradients back through the extra outputs, and the tutorial's
# form runs its whole backward again, zeros included.
from double_backward import sinh
from double_backward.functions.sinh_variants import sinh_tutorial

for name, fn in (("tutorial", sinh_tutorial), ("Sinh", sinh)):
    first, second = backward_ops(fn, torch.randn(4))
    show_ops(f"{name}, first backward", first)
    show_ops(f"{name}, second backward", second)

# %%
# The measured price: :class:`~double_backward.functions.sinh_variants.SinhMaterialized` is
# :class:`~double_backward.functions.sinh_variants.SinhOutOfPlace` with the zeros
# materialised, and nothing else changed. Double backward time, custom / native, at each size:
print(f"{'':<28}{size_labels}")
for name in (
    "Sinh, before: out of place",
    "Sinh, zeros materialised",
    "Sinh, tutorial form",
):
    print(ratio_row(name))

# %%
# ... and can turn an overflow into ``nan``
# -----------------------------------------
# In float32, :math:`e^{100}` overflows to ``inf``. The zeros the tutorial's backward multiplies
# in then give :math:`0 \cdot \infty = \mathrm{nan}`, where :func:`torch.cosh` says ``inf``.
# (It is also ``inf`` from 88.7 on, where :math:`\sinh x` is still finite, because it saves
# :math:`e^{x}` rather than :math:`e^{x}/2`.)
from double_backward.functions.sinh_variants import sinh_materialized

x = torch.tensor([1.0, 89.0, 100.0], requires_grad=True)
print(f"{'':<19}{'y at x = 1, 89, 100':^27} | {'dy/dx at x = 1, 89, 100':^27}")
for name, fn in (("tutorial form", sinh_tutorial), ("zeros materialised", sinh_materialized),
                 ("package Sinh", sinh), ("torch.sinh", torch.sinh)):
    y = fn(x)
    (grad_x,) = torch.autograd.grad(y.sum(), x)
    values = "".join(f"{v:9.3g}" for v in y.tolist())
    grads = "".join(f"{g:9.3g}" for g in grad_x.tolist())
    print(f"{name:<19}{values} | {grads}")

# %%
# The package's ``Sinh``: before and after
# ----------------------------------------
# Measured first, the package's ``Sinh`` built each exponential out of place (``x - ln 2``,
# then its exponential, each a new tensor) and summed the second backward's products one
# temporary at a time: that form is kept as
# :class:`~double_backward.functions.sinh_variants.SinhOutOfPlace`. Forward runs in no-grad
# mode, so ``exp_`` may overwrite the fresh ``x - ln 2``; backward now adds each product with
# ``torch.addcmul``. Same saved tensors, fewer allocations:
#
# .. literalinclude:: /../src/double_backward/functions/saving_intermediates.py
#    :pyobject: Sinh.forward
#
from double_backward.functions.sinh_variants import sinh_out_of_place

x = torch.randn(4)
for name, fn in (("before", sinh_out_of_place), ("after", sinh)):
    show_ops(f"{name}, forward", aten_ops(lambda fn=fn: fn(x)))
for size in settings["sizes"][-3:]:
    before, after = (
        time_series(times, name)[1][settings["sizes"].index(size)]
        for name in ("Sinh, before: out of place", "Sinh")
    )
    print(f"double backward at {size:.0e}: before {before:.2f}x, after {after:.2f}x "
          "torch.sinh")

# %%
# When recomputing wins
# ---------------------
# :class:`~double_backward.functions.sinh_variants.SinhRecompute` saves only ``x`` and
# recomputes both exponentials in backward: no extra outputs, nothing extra kept between
# forward and backward, two more exponentials per backward.
#
# .. literalinclude:: /../src/double_backward/functions/sinh_variants.py
#    :pyobject: SinhRecompute
#
# Saving costs 8 bytes per element for as long as the graph lives, which in a deep network is
# from the forward of the layer to its backward; recomputing costs time only while backward
# runs. When memory decides how large a batch or model fits, recompute (the trade
# ``torch.utils.checkpoint.checkpoint`` makes for whole blocks); when time does, save.
# Wrapping the native kernels themselves in a Function
# (:class:`~double_backward.functions.sinh_variants.SinhNativeOps`) costs a fixed overhead per
# call (``apply``), which large sizes dilute. Below, the extra bytes saved, the peak memory of
# one double backward (see the next section) and the time at 1e6 elements, then the time at
# each size.
peaks = {
    row["case"]: row
    for row in measurements["devices"]["cpu"]["peak_memory"]
    if row["size"] == settings["target_size"]
}
for name in ("Sinh", "Sinh, recompute in backward", "Sinh, native ops inside"):
    extra_bytes = saved[name].extra_bytes / n
    peak = peaks[name]["custom_peak_bytes"] / settings["target_size"]
    native_peak = peaks[name]["native_peak_bytes"] / settings["target_size"]
    ratio = time_at_target[name]
    print(f"{name:<28} extra {extra_bytes:.0f} B/elt, peak {peak:.0f} B/elt "
          f"(torch.sinh {native_peak:.0f}), time {ratio:.2f}x")
print(f"\n{'':<28}{size_labels}")
for name in ("Sinh", "Sinh, recompute in backward", "Sinh, native ops inside"):
    print(ratio_row(name))

# %%
# Peak memory of one double backward
# ----------------------------------
# The most memory allocated at once during one double backward at 1e6 elements, above the
# input, from the allocations and frees ``torch.profiler`` records
# (:func:`~double_backward.costs.peak_memory`). It sees torch's allocator only: the NumPy
# temporaries of ``Cube``'s backward are not in it.
for name, row in peaks.items():
    custom, native = (row[f"{side}_peak_bytes"] / settings["target_size"]
                      for side in ("custom", "native"))
    print(f"{name:<28} {custom:5.1f} B/elt  (native {native:5.1f})")

# %%
# A built-in replaced: attention without the L×S matrix
# -----------------------------------------------------
# torch's default CPU attention kernel has no double backward; its MATH backend has one, but
# keeps the L×S attention matrix for backward (:doc:`plot_14_builtins_without_double_backward`).
# :func:`double_backward.ops.scaled_dot_product_attention` keeps q, k, v, the output and one
# logsumexp per query, and recomputes the matrix in backward. Counted now at the benchmark's
# shape: q, k and v are views of one stacked tensor, so all three count as the input.
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from double_backward import ops

attention = load_measurements("attention")
shape = attention["settings"]
batch, heads = shape["batch"], shape["heads"]
length, features = shape["length"], shape["features"]


def math_attention(q, k, v):
    with sdpa_kernel(SDPBackend.MATH):
        return F.scaled_dot_product_attention(q, k, v)


attention_sides = {
    "ops.scaled_dot_product_attention": ops.scaled_dot_product_attention,
    "MATH backend": math_attention,
}
qkv = torch.randn(3, batch, heads, length, features)
attention_extra = {
    name: saved_tensors(lambda t, fn=fn: fn(*t.unbind(0)), qkv).extra_bytes
    for name, fn in attention_sides.items()
}
print(f"B={batch}, H={heads}, L=S={length}, d={features}, float32")
for name, extra_bytes in attention_extra.items():
    print(f"{name:<34} kept beyond inputs and output: {extra_bytes / 2**20:6.2f} MiB")
ours, theirs = attention_extra.values()
mark = "met" if ours / theirs <= 0.01 else "MISSED"
print(f"ops / MATH: {ours / theirs:.4f} (target <= 0.01: {mark})")

# %%
# The time it costs, from the committed run (``nox -s bench_functions``, which writes
# ``measurements/attention.json``): a training step (forward + backward) and a gradient penalty
# (forward, gradients with ``create_graph=True``, the backward of their squared norm), each
# against the MATH backend in paired rounds, and the peak memory of each
# (:func:`~double_backward.costs.peak_memory`). Recomputing costs one more matrix product per
# backward; computing the scores a block of queries at a time, in one reused buffer instead of
# a fresh L×S matrix, wins it back when nothing is recorded. The gradient penalty's recorded
# backward builds the whole matrix, as MATH does, and its second backward runs this Function's
# backward once more (it reaches q, k and v through the output and the logsumexp).
machine = attention["machine"]
print(f"measured {attention['date']} on {machine['cpu']}, {machine['cores']} cores, "
      f"torch {machine['torch']}, 1 thread, {shape['rounds']} paired rounds")
labels = {
    "forward_backward": "forward + backward",
    "gradient_penalty": "gradient penalty",
}
for kind, label in labels.items():
    row = attention["times"][kind]
    seconds = f"{row['custom_seconds']:.3f} s / {row['native_seconds']:.3f} s"
    print(f"{label:<20} {seconds} = {row['ratio']:.2f}x (middle half "
          f"{row['ratio_q1']:.2f} to {row['ratio_q3']:.2f})")
for kind, label in labels.items():
    peak = attention["peak_memory"][kind]
    print(f"{label:<20} peak memory {peak['custom'] / 2**20:5.0f} MiB / "
          f"{peak['native'] / 2**20:5.0f} MiB")
for row in attention["targets"]:
    mark = "met" if row["met"] else "MISSED"
    print(f"target {row['target']:<17} {row['ratio']:.4f} <= {row['at_most']}: {mark}")

# %%
# The same figures drawn: memory kept for backward on the left (counted now), time on the
# right (committed), each bar custom / MATH with its target.
from double_backward.cost_plots import attention_figure

attention_figure(attention, attention_extra, labels)
plt.show()

# %%
# Conclusion
# ----------
# A custom Function can be as fast as the native op, or faster when its backward is simpler
# than the general formula (``Square``). Saving an input or an output costs no extra memory;
# returning intermediates as extra outputs costs one tensor each, and
# ``set_materialize_grads(False)`` keeps them from costing zeros, time and ``nan`` as well, in
# eager mode (``torch.compile`` materialises the zeros: :doc:`plot_19_torch_compile`).
# Recompute when memory is the limit. To check that your own Function differentiates twice,
# see :doc:`plot_16_check_your_function`; the rules behind every case are in
# :doc:`plot_00_grad_mode_rules`.
