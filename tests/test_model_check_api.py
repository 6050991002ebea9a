"""check_model's arguments and report: which penalty (wrt), keyword inputs, callables and the
modules they close over, state, precision, and "could not decide". Expected values come from
plain torch or from the construction of each case."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from double_backward import check_model
from double_backward.checker.model.calls import closed_modules, fresh, snapshot
from double_backward.checker.shared.fixes import FIXES, fix_for
from double_backward.functions.failures import SquareDetachesInBackward


def small_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 1))


# -- which penalty ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("wrt", "name"),
    [("inputs", "R1 / WGAN-GP"), ("parameters", "MAML"), ("both", "both")],
)
def test_the_report_names_the_penalty_run(wrt, name):
    report = check_model(small_mlp(), torch.randn(4, 3), wrt=wrt)
    assert report.ok, str(report)
    assert name in report.penalty and f"penalty: {report.penalty[:10]}" in str(report)


def test_the_default_penalty_is_r1():
    assert "R1" in check_model(small_mlp(), torch.randn(4, 3)).penalty


class BagCritic(nn.Module):
    """An EmbeddingBag with per-sample weights beside a float input: R1 (the input gradient)
    never differentiates the bag's backward; MAML (the parameter gradient) does."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.bag = nn.EmbeddingBag(10, 3, mode="sum")
        self.head = nn.Linear(6, 1)

    def forward(self, x, ids, weights):
        return self.head(
            torch.tanh(torch.cat([x, self.bag(ids, per_sample_weights=weights)], 1))
        )


def _bag_penalty(model, x, ids, weights, wrt):
    """Plain torch: R1 or MAML's penalty."""
    x = x.detach().clone().requires_grad_()
    params = list(model.parameters())
    first = [x] if wrt == "inputs" else params
    (grads) = torch.autograd.grad(model(x, ids, weights).sum(), first, create_graph=True,
                                  allow_unused=True)  # fmt: skip
    total = sum((g**2).sum() for g in grads if g is not None and g.requires_grad)
    torch.autograd.grad(
        total, [x, *params] if wrt == "inputs" else params, allow_unused=True
    )


def test_an_embedding_bag_critic_breaks_under_maml_not_under_r1():
    # x requires grad: the input R1 differentiates (per_sample_weights is a float input too).
    model, x = BagCritic(), torch.randn(3, 3).requires_grad_()
    ids, weights = torch.tensor([[1, 2], [3, 4], [5, 6]]), torch.rand(3, 2)
    _bag_penalty(model, x, ids, weights, "inputs")  # runs
    with pytest.raises(RuntimeError, match="embedding_bag"):
        _bag_penalty(model, x, ids, weights, "parameters")
    assert check_model(model, x, ids, weights).ok
    report = check_model(model, x, ids, weights, wrt="parameters")
    assert [b.module for b in report.breaks] == ["bag"], str(report)
    # Looked up by the module's type: nn.EmbeddingBag's entry.
    assert report.breaks[0].fix == FIXES["nn.EmbeddingBag"]


def test_bad_arguments_name_what_to_pass():
    with pytest.raises(
        ValueError, match="wrt must be one of 'inputs', 'parameters', 'both'"
    ):
        check_model(small_mlp(), torch.randn(2, 3), wrt="params")
    with pytest.raises(TypeError, match="kwargs must be a dict"):
        check_model(small_mlp(), torch.randn(2, 3), kwargs=[1])
    with pytest.raises(TypeError, match="parameters must be an iterable of tensors"):
        check_model(lambda x: x * 2, torch.randn(2), parameters=torch.randn(2))
    with pytest.raises(ValueError, match="parameters=\\[...\\]"):
        check_model(lambda x: torch.sin(x), torch.randn(2), wrt="parameters")
    with pytest.raises(ValueError, match="calling the model raised ZeroDivisionError"):
        check_model(lambda x: x / 0 if 1 / 0 else x, torch.randn(2))


# -- token ids: the parameters by default, the embeddings on request ----------------------
class Squares(nn.Module):
    def __init__(self, square) -> None:
        super().__init__()
        self.square = square

    def forward(self, x):
        return self.square(x)


class TinyLM(nn.Module):
    """Token ids in, logits out: an nn.Embedding, a square, a head (no transformers)."""

    def __init__(self, square=torch.square) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(10, 4)
        self.mix = Squares(square)
        self.head = nn.Linear(4, 3)

    def forward(self, ids):
        return self.head(torch.tanh(self.mix(self.embed(ids))))


IDS = torch.tensor([[1, 4, 2], [7, 3, 9]])


def _after_the_embedding(model):
    """The model from its embedding's output on, in float64: what gradgradcheck is given."""
    model = model.double()
    return lambda e: model.head(torch.tanh(model.mix(e)))


def test_token_ids_alone_differentiate_the_parameters_and_the_report_says_so():
    model = TinyLM()
    # Plain torch: double backward through the parameters is right (gradgradcheck).
    double = TinyLM().double()
    names, values = zip(*[(n, p.detach().requires_grad_()) for n, p in
                          double.named_parameters()], strict=True)  # fmt: skip

    def of_parameters(*values):
        return torch.func.functional_call(double, dict(zip(names, values, strict=True)),
                                          (IDS,))  # fmt: skip

    assert torch.autograd.gradgradcheck(of_parameters, values)
    report = check_model(model, IDS)
    text = " ".join(str(report).split())
    assert report.ok, str(report)
    assert report.wrt == "parameters" and "MAML" in report.penalty
    assert "no input is floating point (int64 tensors: token ids?)" in text
    assert "wrt='embeddings'" in text
    assert "0 input(s), 3 parameter tensor(s)" in text  # embed, head's two


def test_the_embeddings_on_request_are_the_embedding_output():
    e = TinyLM().embed(IDS).detach().double().requires_grad_()
    # Plain torch: the correct square passes gradgradcheck from the embedding's output on,
    # the one that detaches in backward does not; it is applied in `mix`.
    assert torch.autograd.gradgradcheck(_after_the_embedding(TinyLM()), e)
    broken = TinyLM(SquareDetachesInBackward.apply)
    assert not torch.autograd.gradgradcheck(
        _after_the_embedding(TinyLM(SquareDetachesInBackward.apply)), e,
        raise_exception=False,
    )  # fmt: skip
    report = check_model(TinyLM(), IDS, wrt="embeddings")
    text = " ".join(str(report).split())
    assert report.ok and report.wrt == "embeddings", str(report)
    assert "1 output(s) of the input embedding (embed)" in text
    assert "along the embeddings and parameters" in text
    report = check_model(broken, IDS, wrt="embeddings")
    found = [(b.module, b.kind) for b in report.breaks]
    assert found == [("mix", "silent")], str(report)
    assert broken.embed.weight.dtype == torch.float32  # the model itself is not changed
    # A callable over the model: its modules are hooked and cast in place, and put back.
    model = TinyLM()
    report = check_model(lambda ids: model(ids), IDS, wrt="embeddings")
    assert report.ok and "(model.embed)" in " ".join(report.checked), str(report)
    assert not model.embed._forward_hooks and model.embed.weight.dtype == torch.float32


class PositionsFirst(nn.Module):
    """A position embedding registered before the token embedding."""

    def __init__(self, says: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.positions, self.tokens = nn.Embedding(3, 4), nn.Embedding(10, 4)
        self.head, self.says, self.calls = nn.Linear(4, 2), says, 0

    def get_input_embeddings(self):
        if not self.says:  # as transformers' base class without a base model
            raise NotImplementedError
        return self.tokens

    def forward(self, ids):
        self.calls += 1
        hidden = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
        return self.head(torch.tanh(hidden))


@pytest.mark.parametrize(("says", "chosen"), [(True, "tokens"), (False, "positions")])
def test_the_input_embedding_is_get_input_embeddings_else_the_first_one(says, chosen):
    report = check_model(PositionsFirst(says), IDS, wrt="embeddings")
    assert report.ok, str(report)
    assert f"1 output(s) of the input embedding ({chosen})" in " ".join(report.checked)


def test_token_ids_give_clear_errors_naming_the_choices():
    with pytest.raises(ValueError, match="wrt='inputs': no input is floating point "
                       r"\(int64 tensors: token ids\?\); pass wrt='parameters'.*"
                       "wrt='embeddings'"):  # fmt: skip
        check_model(TinyLM(), IDS, wrt="inputs")
    with pytest.raises(ValueError, match="wrt must be one of 'inputs', 'parameters', "
                       "'both', 'embeddings' .*got 'embedding'"):  # fmt: skip
        check_model(TinyLM(), IDS, wrt="embedding")
    with pytest.raises(ValueError, match="wrt must be one of"):
        check_model(TinyLM(), IDS, wrt=0)
    with pytest.raises(ValueError, match=r"no input embedding .*\(inputs_embeds="):
        check_model(small_mlp(), torch.randn(2, 3), wrt="embeddings")
    unused = TinyLM()
    with pytest.raises(ValueError, match=r"\(unused.embed\) returned no float"):
        check_model(lambda x: unused.head(x), torch.randn(2, 4), wrt="embeddings")
    assert not unused.embed._forward_hooks  # taken off

    class Varies(PositionsFirst):  # looks its tokens up again after the first call
        def forward(self, ids):
            again = self.tokens(ids)[..., :2] if self.calls > 1 else 0
            return super().forward(ids) + again

    with pytest.raises(ValueError, match="embedding was called differently than"):
        check_model(Varies(True), IDS, wrt="embeddings")


# -- keyword inputs and outputs ------------------------------------------------------------
class Masked(nn.Module):
    """Keyword inputs, a float mask that must stay without grad, and a dict output."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.inner = nn.Linear(4, 4)

    def forward(self, *, embeds, mask):
        assert not mask.requires_grad, "the mask was made a leaf"
        return {"hidden": torch.tanh(self.inner(embeds)) * mask[..., None], "n": 3}


def test_keyword_inputs_dict_outputs_and_a_mask_kept_without_grad():
    embeds = torch.randn(2, 3, 4, requires_grad=True)  # the one to differentiate
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    report = check_model(Masked(), kwargs={"embeds": embeds, "mask": mask})
    assert report.ok, str(report)
    assert "do not require grad" in str(report)


def test_recorded_arguments_are_kept_as_they_were():
    class Cache:
        def __init__(self, kept):
            self.kept = [kept]

    x = torch.randn(3, requires_grad=True) * 2  # differentiated: requires grad
    mask = torch.ones(3)
    cache = Cache(x)
    args = snapshot((x, mask, cache))
    assert args[0] is not x and args[0].is_leaf and args[0].requires_grad
    assert args[1] is mask and not args[1].requires_grad  # identity kept
    assert (
        args[2] is not cache and not args[2].kept[0].requires_grad
    )  # copied, detached
    again = fresh(args)
    assert again[0] is args[0] and again[2] is not args[2]  # each call: a new cache
    again[2].kept.append(1)
    assert len(args[2].kept) == 1


# -- callables ---------------------------------------------------------------------------
def test_a_lambda_over_a_model_is_differentiated_with_its_parameters_and_put_back():
    model = small_mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    report = check_model(lambda t: model(t), torch.randn(4, 3), wrt="both")
    assert report.ok, str(report)
    checked = " ".join(report.checked)
    assert "model (Sequential)" in checked and "4 parameter tensor(s)" in checked
    for key, value in model.state_dict().items():
        assert value.dtype == torch.float32 and torch.equal(value, before[key])


def test_closed_over_modules_are_found_in_cells_defaults_and_bound_methods():
    a, b = nn.Linear(2, 2), nn.Linear(2, 2)

    def with_default(x, layer=b):
        return a(layer(x))

    assert set(closed_modules(with_default)) == {"a", "layer"}
    assert closed_modules(a.forward) == {"self": a}
    assert closed_modules(lambda x: x) == {}


def test_tensors_a_callable_closes_over_are_its_parameters():
    weight = torch.randn(3, 2, requires_grad=True)
    report = check_model(
        lambda x: torch.tanh(x @ weight), torch.randn(4, 3), wrt="both"
    )
    assert report.ok, str(report)
    assert "weight (tensor)" in " ".join(report.checked)
    assert weight.dtype == torch.float32  # cast for the float64 check, then put back


def test_a_callable_reaching_parameters_another_way_is_told_to_pass_them():
    found = {"weight": torch.randn(3, 2, requires_grad=True)}

    def reach(x):
        return torch.tanh(x @ lookup()["weight"])

    def lookup():
        return found

    with pytest.raises(ValueError, match="pass it in parameters="):
        check_model(reach, torch.randn(4, 3))  # float64 x @ float32 weight
    report = check_model(reach, torch.randn(4, 3), parameters=[found["weight"]],
                         wrt="parameters")  # fmt: skip
    assert report.ok, str(report)


# -- state and precision -----------------------------------------------------------------
def test_buffers_are_restored_before_every_call_and_after():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Tanh(), nn.Linear(4, 1)
    )
    before = model[1].running_mean.clone()
    assert check_model(model, torch.randn(5, 3)).ok
    assert torch.equal(model[1].running_mean, before)
    # A callable's modules are used in place: their buffers are put back too.
    assert check_model(lambda t: model(t), torch.randn(5, 3)).ok
    assert torch.equal(model[1].running_mean, before)
    assert model[1].num_batches_tracked.item() == 0


def test_casts_to_float32_are_widened_and_remaining_float32_is_said():
    torch.manual_seed(0)
    layer = nn.Linear(3, 4)
    widened = check_model(lambda x: F.softmax(layer(x), -1, dtype=torch.float32),
                          torch.randn(2, 3))  # fmt: skip
    assert widened.ok and "widened to float64: softmax (" in " ".join(widened.checked)
    # A positional dtype is not a cast check_model widens: float32 stays, and is said.
    island = check_model(lambda x: torch.softmax(layer(x), -1, torch.float32),
                         torch.randn(2, 3))  # fmt: skip
    assert island.ok, str(island)
    checked = " ".join(island.checked)
    assert "float32 computations remain" in checked and "tolerance 2e-02" in checked


def test_no_direction_deciding_is_never_a_pass():
    # |x| at x = 0: the gradient jumps along every direction.
    report = check_model(lambda x: x.abs() * 3, torch.zeros(4))
    assert not report.ok and not report.breaks
    assert report.undecided and "could not decide" in str(report).splitlines()[0]
    assert "try other inputs" in report.undecided


def test_silent_breaks_give_a_relative_error_and_where_they_were_seen():
    class Detached(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 3)

        def forward(
            self, x
        ):  # the square's derivative, taken out of autograd: 2x as data
            y = self.linear(x)
            return y.detach() * y + torch.sin(x)

    torch.manual_seed(0)
    report = check_model(nn.Sequential(Detached(), nn.Linear(3, 1)), torch.randn(2, 3))
    (found,) = report.breaks
    assert found.kind == "silent" and found.module == "0"
    assert "relative to its size (tolerance 1e-03)" in found.message
    assert found.seen == "the whole model and the submodule alone"
    assert "(not identified)" not in str(report) and "Detached" in found.op


def test_fixes_are_looked_up_by_module_type():
    op = "aten::_scaled_dot_product_flash_attention_for_cpu"
    assert "need_weights=True" in fix_for(op, nn.MultiheadAttention(4, 2))
    assert "need_weights=True" not in fix_for(op, nn.Linear(2, 2))


# -- what the helpers find ------------------------------------------------------------------
def test_partials_keyword_defaults_globals_and_nested_modules_are_found():
    import functools

    outer = nn.Sequential(nn.Linear(2, 2))
    inner = outer[0]

    def apply(x, layer):
        return layer(x)

    assert closed_modules(functools.partial(apply, layer=outer)) == {"layer": outer}
    assert closed_modules(functools.partial(apply, torch.zeros(1), outer)) == {
        "args[1]": outer
    }

    def keyword_default(x, *, layer=inner):
        return outer(layer(x))

    assert closed_modules(keyword_default) == {"outer": outer}  # inner is inside outer
    assert closed_modules(uses_a_global) == {"GLOBAL_LAYER": GLOBAL_LAYER}
    assert closed_modules(print) == {}

    def empty_cell(x):
        return later(x)

    assert closed_modules(empty_cell) == {}
    later = inner  # noqa: F841 - the cell is filled after the lookup above


GLOBAL_LAYER = nn.Linear(2, 2)


def uses_a_global(x):
    return GLOBAL_LAYER(x)


def test_a_module_at_top_level_used_by_a_function_is_checked_and_put_back():
    report = check_model(uses_a_global, torch.randn(3, 2), wrt="both")
    assert report.ok, str(report)
    assert GLOBAL_LAYER.weight.dtype == torch.float32


def test_named_tuples_and_objects_inside_containers_are_copied():
    from collections import namedtuple

    class Holder:
        def __init__(self):
            self.value = torch.ones(2, requires_grad=True) * 1

    Pair = namedtuple("Pair", "a b")
    x = torch.randn(2, requires_grad=True) * 1
    kept = snapshot({"pair": Pair(x, 3), "held": [Holder()], "plain": "text"})
    assert (
        isinstance(kept["pair"], Pair)
        and kept["pair"].a.is_leaf
        and kept["pair"].b == 3
    )
    assert not kept["held"][0].value.requires_grad and kept["plain"] == "text"
    slotted = snapshot((object(),))  # an object without __dict__: kept as it is
    assert type(slotted[0]) is object


def test_widening_covers_half_to_other_and_type():
    from double_backward.checker.model.calls import Widen

    x = torch.randn(3, dtype=torch.float64)
    other = torch.randn(1, dtype=torch.float32)
    with Widen() as widen:
        results = [x.half(), x.to(other), x.type(torch.float32), x.to(torch.float16)]
    assert all(r.dtype == torch.float64 for r in results)
    assert set(widen.widened) == {"half", "to", "type"}


class Stateful(nn.Module):
    """A module keeping a non-leaf tensor as an attribute after a forward: no deepcopy."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        self.last = self.linear(x)
        return torch.tanh(self.last)


def test_a_model_that_cannot_be_copied_is_told_to_pass_a_callable():
    model = Stateful()
    model(torch.randn(1, 2, requires_grad=True))
    with pytest.raises(ValueError, match="pass a callable over it"):
        check_model(model, torch.randn(3, 2))
    assert check_model(lambda t: model(t), torch.randn(3, 2)).ok


class RefusesCreateGraph(torch.autograd.Function):
    """A backward that raises when asked for a graph (grad mode on): no ATen op named."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, grad):
        if torch.is_grad_enabled():
            raise RuntimeError("this backward cannot be differentiated")
        (x,) = ctx.saved_tensors
        return grad * 3 * x**2


class Wrap(nn.Module):
    def __init__(self, function):
        super().__init__()
        self.function, self.linear = function, nn.Linear(3, 3)

    def forward(self, x):
        return self.function.apply(self.linear(x)) + torch.sin(x)


def test_an_error_naming_no_op_and_a_custom_function_are_named():
    torch.manual_seed(0)
    model = nn.Sequential(Wrap(RefusesCreateGraph), nn.Linear(3, 1))
    x = torch.randn(2, 3)
    x_ = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="cannot be differentiated"):  # plain torch
        torch.autograd.grad(model(x_).sum(), x_, create_graph=True)
    (found,) = check_model(model, x).breaks
    assert (found.module, found.kind) == ("0", "raises")
    assert found.op == "RefusesCreateGraph"  # the custom Function in its graph
    torch.manual_seed(0)
    (found,) = check_model(
        nn.Sequential(Wrap(SquareDetachesInBackward), nn.Linear(3, 1)), x
    ).breaks
    assert (found.module, found.op, found.kind) == (
        "0",
        "SquareDetachesInBackward",
        "silent",
    )
    assert "double_backward.check" in found.fix


def test_an_error_with_no_op_and_no_function_says_to_read_it():
    from double_backward.checker.model.locate import name_break
    from double_backward.checker.model.penalty import NotDifferentiable, Outcome

    class Failing:  # a target whose call fails: no graph to read
        def outputs(self):
            raise NotDifferentiable("no output")

    raised = name_break(
        "m", Outcome("raises", "RuntimeError: freed"), Failing(), nn.Tanh(), ""
    )
    assert raised.op == "Tanh's second derivative" and "read its message" in raised.fix
    silent = name_break("", Outcome("silent", "differs"), Failing(), None, "")
    assert silent.op == "the callable's second derivative" and "in-place" in silent.fix


def _r1_second_derivative_error(layer: nn.Module, x: torch.Tensor) -> float:
    """Plain torch, float64: uᵀ J v of R1's input gradient by autograd against central
    differences (step 1e-5) along v over the input and the parameters, buffers restored
    before every call."""
    saved = [b.clone() for b in layer.buffers()]
    x = x.double().requires_grad_()
    leaves = [x, *layer.parameters()]
    generator = torch.Generator().manual_seed(0)
    v = [torch.randn(t.shape, generator=generator, dtype=torch.float64) for t in leaves]
    u = torch.randn(2, 4, generator=generator, dtype=torch.float64)

    def input_gradient(create_graph):
        with torch.no_grad():
            for buffer, value in zip(layer.buffers(), saved, strict=True):
                buffer.copy_(value)
        return torch.autograd.grad((layer(x) * u).sum(), x, create_graph=create_graph)[
            0
        ]

    w = torch.ones(2, 3, dtype=torch.float64)
    jt_u = torch.autograd.grad(
        (input_gradient(True) * w).sum(), leaves, allow_unused=True
    )
    analytic = sum(
        float((a * b).sum()) for a, b in zip(jt_u, v, strict=True) if a is not None
    )

    def moved(t):
        with torch.no_grad():
            for leaf, d in zip(leaves, v, strict=True):
                leaf.add_(t * d)
        out = input_gradient(False)
        with torch.no_grad():
            for leaf, d in zip(leaves, v, strict=True):
                leaf.sub_(t * d)
        return out

    numeric = float((((moved(1e-5) - moved(-1e-5)) / 2e-5) * w).sum())
    return abs(analytic - numeric) / max(abs(analytic), abs(numeric))


def test_spectral_norm_training_is_ok_its_power_iteration_held():
    """Plain torch: shifted forwards that run the iteration again (buffers put back before
    each) see u and v move with the weight, a derivative autograd never takes; with u and v
    held where a training forward leaves them (eval mode reads them), central differences
    agree. check_model holds them: ok, with a note."""
    torch.manual_seed(0)
    layer = nn.utils.spectral_norm(nn.Linear(3, 4)).double()
    x = torch.randn(2, 3)
    assert _r1_second_derivative_error(layer, x) > 1e-3  # u and v moving
    with torch.no_grad():
        layer(x.double())  # one training forward: u and v where training leaves them
    assert _r1_second_derivative_error(layer.eval(), x) < 1e-6  # u and v held
    torch.manual_seed(0)
    model = nn.Sequential(nn.utils.spectral_norm(nn.Linear(3, 4)), nn.Tanh())
    report = check_model(model, torch.randn(2, 3))
    assert report.ok and not report.breaks, str(report)
    assert "spectral norm in train mode (0)" in str(report), str(report)
    assert "spectral norm" not in str(check_model(model.eval(), torch.randn(2, 3)))
