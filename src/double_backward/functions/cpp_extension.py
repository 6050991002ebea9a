r"""The fourth case in C++: y = x³ with a hand-written backward kernel, as a C++ extension.

The C++ source, ``csrc/cube.cpp`` beside this module, has two kernels (loops over raw
pointers, which autograd cannot see) and three C++ ``torch::autograd::Function``\ s:

- ``CubeUntracked``, whose backward calls the backward kernel
  :math:`\bar{x} = 3x^2\,\bar{y}` directly. Its first derivative is right; the gradient has
  no history, so a second backward fails. Exposed as :func:`cube_untracked`.
- ``Cube``, whose backward calls ``CubeBackward::apply`` instead: the same kernel wrapped in
  a Function whose own backward is written in ATen ops on the saved inputs. Autograd records
  that call, so second, third and higher derivatives work. Exposed as :func:`cube` and
  :func:`cube_backward`.

The extension is compiled on first use with :func:`torch.utils.cpp_extension.load` (ninja and
a C++ compiler) into a build directory in a cache outside the source tree:
``$DOUBLE_BACKWARD_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/double_backward`` or
``~/.cache/double_backward``. The directory's name holds a hash of the source, the torch
version and the Python ABI, so a changed source or torch builds afresh, and a finished build
is imported again directly (no compiler needed) by every later process: tests, docs builds,
the example scripts.

A reader's own version of the source (the downloads hold ``cube.cpp`` as an editable string)
is built the same way by ``load_extension(source=...)``, which makes it the process's extension:
:func:`cube` and the others then run it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import platform
import shutil
import sys
import sysconfig
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch

from .._extras import missing_extra
from ._validation import check_real_tensor

__all__ = [
    "SUPPORTED_DTYPES",
    "Build",
    "CompilerNotFoundError",
    "PythonHeadersNotFoundError",
    "build_directory",
    "cache_dir",
    "cube",
    "cube_backward",
    "cube_untracked",
    "load_extension",
]

SOURCE = Path(__file__).with_name("csrc") / "cube.cpp"
CACHE_DIR_VARIABLE = "DOUBLE_BACKWARD_CACHE_DIR"
# The dtypes the kernels are written for (AT_DISPATCH_FLOATING_TYPES in cube.cpp).
SUPPORTED_DTYPES = (torch.float32, torch.float64)
_EXTRA_CFLAGS = ("-O2",)
# Written after a build has been imported once: the library in the directory is complete.
_DONE_MARKER = "built-ok"


class CompilerNotFoundError(RuntimeError):
    """No C++ compiler to build the extension with; the message says how to install one."""


class PythonHeadersNotFoundError(RuntimeError):
    """No ``Python.h`` to build the extension against; the message says how to install it."""


@dataclasses.dataclass(frozen=True)
class Build:
    """The loaded extension, where it lives, and how long loading it took."""

    module: ModuleType
    directory: Path
    seconds: float
    from_cache: bool


def cache_dir() -> Path:
    """The cache root: ``$DOUBLE_BACKWARD_CACHE_DIR``, else the user's cache folder."""
    configured = os.environ.get(CACHE_DIR_VARIABLE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "double_backward"


def build_key(source: str | None = None) -> str:
    """A hash of everything the compiled library depends on besides the compiler.

    ``source`` is C++ source text to build instead of ``csrc/cube.cpp``.
    """
    code = SOURCE.read_bytes() if source is None else source.encode()
    hasher = hashlib.sha256(code)
    for part in (
        torch.__version__,
        sys.implementation.cache_tag,
        platform.machine(),
        *_EXTRA_CFLAGS,
    ):
        hasher.update(b"\0" + part.encode())
    return hasher.hexdigest()[:16]


def _module_name(key: str) -> str:
    return f"double_backward_cube_{key}"


def build_directory(root: Path | None = None, source: str | None = None) -> Path:
    """Where this source, for this torch and Python, is built: ``<cache>/cpp_extension/<key>``."""
    return (cache_dir() if root is None else root) / "cpp_extension" / build_key(source)


def _compiler_problem() -> str | None:
    """Why torch would find no C++ compiler (it runs ``$CXX``, else ``c++``), or None."""
    compiler = os.environ.get("CXX")
    if compiler is None:
        return None if shutil.which("c++") else "`c++` was not found on PATH"
    if not compiler.strip():
        return "CXX is set but empty"
    if shutil.which(compiler) is None:
        return f"CXX={compiler!r} is not an executable compiler"
    return None


def _require_compiler(directory: Path) -> None:
    problem = _compiler_problem()
    if problem is not None:
        raise CompilerNotFoundError(
            f"No C++ compiler to build the double_backward C++ extension: {problem}.\n"
            "It is compiled once, on first use, and needs a C++ compiler. Install one:\n"
            "  Debian/Ubuntu: sudo apt-get install -y g++\n"
            "  macOS:         xcode-select --install\n"
            "  conda:         conda install -c conda-forge cxx-compiler\n"
            "or set CXX to the compiler's path. The build is then cached in\n"
            f"  {directory}\n"
            f"(set {CACHE_DIR_VARIABLE} to move it)."
        )


def python_headers() -> Path:
    """Where this Python's ``Python.h`` must be for the extension to build."""
    return Path(sysconfig.get_paths()["include"]) / "Python.h"


def _require_python_headers(directory: Path) -> None:
    header = python_headers()
    if not header.is_file():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise PythonHeadersNotFoundError(
            f"No Python headers to build the double_backward C++ extension: {header} "
            "does not exist.\n"
            "The extension is compiled against this Python's headers. Install them:\n"
            f"  Debian/Ubuntu: sudo apt-get install -y python3-dev (or python{version}-dev)\n"
            "  Fedora/RHEL:   sudo dnf install python3-devel\n"
            "  macOS, Windows, conda, uv and pyenv Pythons ship them: reinstall that Python\n"
            "The build is then cached in\n"
            f"  {directory}\n"
            f"(set {CACHE_DIR_VARIABLE} to move it)."
        )


def _import_library(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_SETUPTOOLS_ORDER_WARNINGS = (
    "Distutils was imported before Setuptools",
    "Setuptools is replacing distutils",
)


def _compile(directory: Path, name: str, source: Path = SOURCE) -> ModuleType:
    what = "Building the double_backward C++ extension"
    with warnings.catch_warnings():
        # torch's cpp_extension imports setuptools; when distutils came first (torchviz
        # imports it), the setuptools shim warns about the order. Harmless here, and printed
        # only by a process that compiles, so a page that builds the extension would read
        # differently from one that found it cached.
        for message in _SETUPTOOLS_ORDER_WARNINGS:
            warnings.filterwarnings("ignore", message, UserWarning)
        try:
            from torch.utils import cpp_extension  # imports setuptools
        except ImportError as error:  # the "cpp" extra (setuptools on Python 3.12+)
            raise missing_extra(what, "cpp", error) from error

        if shutil.which("ninja") is None:
            # pip installs ninja into the environment's bin/, which is on PATH only when the
            # environment is activated; torch runs `ninja` by name.
            try:
                import ninja
            except ImportError as error:  # the "cpp" extra
                raise missing_extra(what, "cpp", error) from error

            os.environ["PATH"] = os.pathsep.join(
                [ninja.BIN_DIR, os.environ.get("PATH", "")]
            )
        directory.mkdir(parents=True, exist_ok=True)
        return cpp_extension.load(
            name=name,
            sources=[str(source)],
            extra_cflags=list(_EXTRA_CFLAGS),
            build_directory=str(directory),
            verbose=False,
        )


def build_extension(root: Path | None = None, source: str | None = None) -> Build:
    """Import the extension from the cache under ``root`` (default :func:`cache_dir`), building
    it there first if needed. Raises :class:`CompilerNotFoundError` when it must be built and
    there is no compiler, :class:`PythonHeadersNotFoundError` when there is no ``Python.h``.

    ``source``: C++ source text to build instead of ``csrc/cube.cpp`` (written to ``cube.cpp``
    in its build directory); it must define the same ``PYBIND11_MODULE`` functions.
    """
    if source is not None and not isinstance(source, str):
        raise TypeError(
            "build_extension: source must be the C++ source as a str, "
            f"got {type(source).__name__}"
        )
    directory = build_directory(root, source)
    name = _module_name(directory.name)
    library = directory / f"{name}.so"
    start = time.perf_counter()
    if (directory / _DONE_MARKER).exists() and library.exists():
        module = _import_library(library, name)
        return Build(module, directory, time.perf_counter() - start, from_cache=True)
    _require_compiler(directory)
    _require_python_headers(directory)
    source_path = SOURCE
    if source is not None:
        directory.mkdir(parents=True, exist_ok=True)
        source_path = directory / SOURCE.name
        source_path.write_text(source)
    module = _compile(directory, name, source_path)
    (directory / _DONE_MARKER).write_text(f"{name}\n")
    return Build(module, directory, time.perf_counter() - start, from_cache=False)


_loaded: list[Build] = []  # the process's one Build, once made


def load_extension(source: str | None = None) -> Build:
    """The extension, built or imported once per process (see :func:`build_extension`).

    With ``source`` (C++ source text), that source is built (or found cached) and becomes the
    process's extension: :func:`cube`, :func:`cube_backward` and :func:`cube_untracked` run it
    from then on.

    Remembered in a module-level list rather than with ``functools.cache``: torch.compile
    warns about every call to a cache-wrapped function it traces, and the Functions below call
    this on every call.
    """
    if source is not None:
        _loaded[:] = [build_extension(source=source)]
    elif not _loaded:
        _loaded.append(build_extension())
    return _loaded[0]


def _check_input(function_name: str, argument_name: str, value: object) -> None:
    check_real_tensor(function_name, argument_name, value)
    assert isinstance(value, torch.Tensor)
    if value.dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"{function_name}: argument '{argument_name}' must be float32 or float64 (the "
            f"dtypes the C++ kernel is written for), got {value.dtype}. "
            "Convert it first, e.g. x.double()."
        )
    if value.device.type != "cpu":
        raise ValueError(
            f"{function_name}: argument '{argument_name}' must be on the CPU (the C++ kernel "
            f"is a CPU loop), got a tensor on {value.device}."
        )


def cube(x: torch.Tensor) -> torch.Tensor:
    """y = x³ by the C++ ``Cube`` Function: differentiable to every order.

    Its backward returns ``CubeBackward::apply(grad_out, x)``: the kernel inside is not
    recorded, but the call is, and ``CubeBackward``'s backward, 3x²·ḡ and 6x·grad_out·ḡ in
    ATen ops, gives the second and higher derivatives. Takes float32 or float64 CPU tensors.
    """
    _check_input("cube", "x", x)
    return load_extension().module.cube(x)


def cube_backward(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """grad_out · 3x² by the C++ ``CubeBackward`` Function, which saves both inputs."""
    _check_input("cube_backward", "grad_out", grad_out)
    _check_input("cube_backward", "x", x)
    return load_extension().module.cube_backward(grad_out, x)


def cube_untracked(x: torch.Tensor) -> torch.Tensor:
    """y = x³ by the C++ ``CubeUntracked`` Function: first derivative only (broken on purpose).

    Its backward calls the backward kernel directly. The kernel writes through raw pointers,
    so the gradient has no ``grad_fn`` even under ``create_graph=True``, and differentiating
    it again raises.
    """
    _check_input("cube_untracked", "x", x)
    return load_extension().module.cube_untracked(x)
