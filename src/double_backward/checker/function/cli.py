"""The command line: ``python -m double_backward.checker module:Function [options]``.

Exit status: 0 no problem found, 1 problems found, 2 usage error or a Function that cannot be
called.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import torch

from .api import check
from .evidence import message


class UsageError(Exception):
    """A command-line argument that cannot be used (exit status 2)."""


def _load(target: str, what: str = "module:Function, e.g. double_backward:Square") -> Any:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected {what}, got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"cannot load {target}: {message(error)}") from error
    return obj


def _function(target: str) -> Callable[..., Any]:
    obj = _load(target)
    if isinstance(obj, type) and issubclass(obj, torch.autograd.Function):
        return obj.apply
    if not callable(obj):
        raise UsageError(f"{target} is neither a torch.autograd.Function nor callable")
    return obj


def _shape(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(size) for size in text.split(",") if size.strip())
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"a shape is sizes separated by commas, got {text!r}"
        ) from error


def _range(text: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"a range is two numbers low,high, e.g. -1,1, got {text!r}"
        ) from error
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise argparse.ArgumentTypeError(f"a range needs finite low < high, got {text!r}")
    return low, high


def _literal(text: str) -> Any:
    """An extra argument: an int, a float, True/False/None, or else the string itself."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return {"True": True, "False": False, "None": None}.get(text, text)


def _int_tensor(text: str) -> torch.Tensor:
    try:
        return torch.tensor([int(v) for v in text.split(",") if v.strip()], dtype=torch.int64,
                            device="cpu")  # fmt: skip
    except ValueError as error:
        raise argparse.ArgumentTypeError(
            f"an integer tensor is integers separated by commas, e.g. 0,2,1, got {text!r}"
        ) from error


def _keyword(text: str) -> tuple[str, Any]:
    name, equals, value = text.partition("=")
    if not equals or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"a keyword argument is NAME=VALUE, got {text!r}")
    return name, _literal(value)


ON_CPU = {"dtype": torch.float64, "device": "cpu"}
DOMAINS = {
    "real": lambda shape, g: torch.randn(shape, generator=g, **ON_CPU),
    "positive": lambda shape, g: torch.rand(shape, generator=g, **ON_CPU) * 2 + 0.1,
    "negative": lambda shape, g: -(torch.rand(shape, generator=g, **ON_CPU) * 2 + 0.1),
    "unit": lambda shape, g: torch.rand(shape, generator=g, **ON_CPU) * 1.8 - 0.9,
    "complex": lambda shape, g: torch.randn(shape, generator=g, device="cpu",
                                            dtype=torch.complex128),  # fmt: skip
}


def _device(text: str) -> torch.device:
    """A device argument, e.g. cpu, cuda, cuda:1."""
    try:
        return torch.device(text)
    except RuntimeError as error:
        raise argparse.ArgumentTypeError(f"not a device: {text!r} ({error})") from error


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m double_backward.checker",
        description="Check a custom autograd Function for double-backward support. "
        "Exit status: 0 no problem found, 1 problems found, 2 usage error or a Function "
        "that cannot be called.",
    )
    parser.add_argument("target", help="module:Function, e.g. double_backward:Square")
    parser.add_argument("--shape", type=_shape, action="append",
                        help="shape of one input tensor, e.g. 3,3 (repeat for several inputs; "
                        "default: one input of shape 3)")  # fmt: skip
    domain = parser.add_mutually_exclusive_group()
    domain.add_argument("--domain", choices=sorted(DOMAINS), default="real",
                        help="where the random inputs lie: real (normal), positive "
                        "(0.1..2.1), negative, unit (-0.9..0.9), complex "
                        "(complex normal)")  # fmt: skip
    domain.add_argument("--range", type=_range, metavar="LOW,HIGH",
                        help="draw the inputs uniformly in [LOW, HIGH]")  # fmt: skip
    parser.add_argument("--arg", action="append", type=_literal, dest="extra", default=[],
                        metavar="VALUE", help="an extra positional argument after the tensors "
                        "(int, float, True/False/None or a string); repeat for "
                        "several")  # fmt: skip
    parser.add_argument("--arg-int-tensor", action="append", type=_int_tensor, dest="extra",
                        metavar="I,J,...", help="an extra positional argument: an int64 "
                        "tensor of indices, e.g. 0,2,1 (kept in order with --arg)")  # fmt: skip
    parser.add_argument("--kwarg", action="append", type=_keyword, default=[],
                        metavar="NAME=VALUE", help="a keyword argument of the Function, e.g. "
                        "seed=3; repeat for several")  # fmt: skip
    parser.add_argument("--setup", metavar="module:function",
                        help="a function returning the arguments (a tuple, or (args, kwargs)) "
                        "instead of random inputs: for arguments the options above cannot "
                        "describe")  # fmt: skip
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--surrogate-gradient", action="store_true",
                        help="the backward is a surrogate on purpose (straight-through, "
                        "gradient reversal): check double backward against it")  # fmt: skip
    parser.add_argument("--points", type=int, default=2, help="points to check at")
    parser.add_argument("--directions", type=int, default=3,
                        help="random signed directions per check (default 3)")  # fmt: skip
    parser.add_argument("--full", action="store_true",
                        help="gradcheck's full mode even for large inputs (slow)")  # fmt: skip
    parser.add_argument("--third-order", action="store_true", help="also check order three")
    parser.add_argument("--require-batched-grad", action="store_true",
                        help="a backward that cannot run on batched incoming gradients "
                        "(is_grads_batched) is a problem, not a note")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0,
                        help="seed of the random inputs and directions (the checker's, not "
                        "the Function's: use --kwarg seed=N for that)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--device", type=_device, default=torch.device("cpu"),
                        help="device of the random inputs, e.g. cuda (default cpu); "
                        "every tensor the check makes follows it")  # fmt: skip
    return parser


def _arguments(args: argparse.Namespace) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The Function's arguments: from ``--setup``, or random tensors and the extras."""
    kwargs = dict(args.kwarg)
    if args.setup:
        made = _load(args.setup, "module:function for --setup")()
        if isinstance(made, tuple) and len(made) == 2 and isinstance(made[1], dict):
            return tuple(made[0]), {**made[1], **kwargs}
        return (tuple(made) if isinstance(made, (tuple, list)) else (made,)), kwargs
    # Drawn on the CPU, then moved: the same seed gives the same inputs on every device.
    generator = torch.Generator(device="cpu").manual_seed(args.seed)
    shapes = args.shape or [(3,)]
    if args.range is not None:
        low, high = args.range
        inputs = [torch.rand(s, generator=generator, **ON_CPU) * (high - low) + low
                  for s in shapes]  # fmt: skip
    else:
        inputs = [DOMAINS[args.domain](s, generator) for s in shapes]
    dtype = getattr(torch, args.dtype)
    inputs = [x.to(dtype.to_complex() if x.is_complex() else dtype).to(args.device)
              for x in inputs]  # fmt: skip
    extra = [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in args.extra]
    return (*inputs, *extra), kwargs


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status (0 ok, 1 problems, 2 usage error)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse printed the usage error
        return int(exit_.code or 0) and 2
    try:
        fn = _function(args.target)
        positional, kwargs = _arguments(args)
        report = check(
            fn, *positional, kwargs=kwargs, dtype=getattr(torch, args.dtype),
            points=max(args.points, 1), directions=max(args.directions, 1),
            fast_mode=False if args.full else None, third_order=args.third_order,
            surrogate_gradient=args.surrogate_gradient, seed=args.seed, name=args.target,
            require_batched_grad=args.require_batched_grad,
        )  # fmt: skip
    except (UsageError, TypeError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    if "function-raised" in report.problem_names():
        if args.dtype == "float64" and "float" in report.problems[0].diagnosis.lower():
            print(f"{parser.prog}: hint: the Function may take float32 only; "
                  "try --dtype float32", file=sys.stderr)  # fmt: skip
        return 2
    return 0 if report.ok else 1
