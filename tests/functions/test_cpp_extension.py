"""The C++ extension (functions/csrc/cube.cpp): its build cache, dtypes, both Functions.

Values and derivatives of ``cube`` against native ``x**3`` at every shape, generated and edge
value are in test_against_native.py (``CppCube`` in tests/helpers.py). Here: what is specific
to a C++ extension.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

import double_backward
from double_backward.functions import cpp_extension
from double_backward.functions.cpp_extension import (
    SUPPORTED_DTYPES,
    CompilerNotFoundError,
    PythonHeadersNotFoundError,
    cube,
    cube_backward,
    cube_untracked,
)
from double_backward.graph_walks import reaches

# The error autograd raises when a tensor without history is differentiated; the page shows it.
NO_GRAPH_ERROR = (
    "element 0 of tensors does not require grad and does not have a grad_fn"
)


@pytest.fixture(scope="module")
def extension() -> cpp_extension.Build:
    # Built into the same cache as the docs build uses, so CI compiles it once.
    return cpp_extension.load_extension()


def test_grad_x_comes_from_the_cpp_cube_backward_node(extension):
    x = torch.tensor([1.0, -2.0], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(cube(x).sum(), x, create_graph=True)
    assert grad_x.grad_fn.name() == "torch::autograd::CppNode<CubeBackward>"
    assert reaches(grad_x, x)


def test_cube_backward_passes_checks_in_both_of_its_inputs(extension):
    torch.manual_seed(0)
    grad_out = torch.randn(3, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(cube_backward, (grad_out, x))
    assert gradgradcheck(cube_backward, (grad_out, x))


def test_untracked_first_derivative_is_right_but_has_no_graph(extension):
    x = torch.tensor([0.0, -1.5, 2.0, 1e103], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(cube_untracked(x).sum(), x, create_graph=True)
    (native,) = torch.autograd.grad((x**3).sum(), x)
    torch.testing.assert_close(grad_x, native, rtol=1e-11, atol=1e-12)
    assert grad_x.grad_fn is None
    assert not grad_x.requires_grad


def test_untracked_second_backward_raises_the_error_the_page_shows(extension):
    x = torch.tensor([1.5], dtype=torch.float64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(cube_untracked(x), x, create_graph=True)
    with pytest.raises(RuntimeError, match=NO_GRAPH_ERROR):
        torch.autograd.grad(grad_x, x)


def test_gradgradcheck_fails_for_untracked_and_passes_for_cube(extension):
    x = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert gradcheck(cube_untracked, (x,))
    with pytest.raises(GradcheckError, match="Numerical gradient"):
        gradgradcheck(cube_untracked, (x,))
    assert gradgradcheck(cube, (x,))


def test_the_checker_gives_the_gradgradcheck_verdict_on_both_versions(extension):
    torch.manual_seed(0)
    x = torch.randn(3, 3, dtype=torch.float64)
    # The expected verdicts come from gradgradcheck, independently of the checker.
    assert gradgradcheck(cube, (x.clone().requires_grad_(),))
    assert not gradgradcheck(
        cube_untracked, (x.clone().requires_grad_(),), raise_exception=False
    )
    good = double_backward.check(cube, x)
    broken = double_backward.check(cube_untracked, x)
    assert good.ok, str(good)
    assert not good.problem_names()
    assert not broken.ok
    assert broken.problem_names(), str(broken)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES)
@pytest.mark.parametrize("function", [cube, cube_untracked])
def test_supported_dtypes_keep_their_dtype_and_match_native(extension, function, dtype):
    x = torch.tensor([0.5, -1.5, 2.0], dtype=dtype, requires_grad=True)
    out = function(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x)
    (native,) = torch.autograd.grad((x**3).sum(), x)
    assert out.dtype == grad_x.dtype == dtype
    torch.testing.assert_close(out, x.detach() ** 3)
    torch.testing.assert_close(grad_x, native)


UNSUPPORTED = [torch.float16, torch.bfloat16, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", UNSUPPORTED)
@pytest.mark.parametrize("function", [cube, cube_untracked])
def test_other_dtypes_get_an_error_naming_the_supported_ones(function, dtype):
    x = torch.ones(2, dtype=dtype)
    with pytest.raises(TypeError, match=r"must be float32 or float64.*got torch\."):
        function(x)


def test_grad_of_an_input_that_does_not_require_grad_fails_like_native(extension):
    x = torch.tensor([1.0, 2.0])
    errors = []
    for fn in (cube, lambda t: t**3):
        with pytest.raises(RuntimeError) as error:
            torch.autograd.grad(fn(x).sum(), x)
        errors.append(str(error.value))
    assert errors[0] == errors[1]
    assert "does not require grad" in errors[0]


def test_unsupported_dtype_in_cube_backward_names_the_argument():
    with pytest.raises(
        TypeError, match="argument 'grad_out' must be float32 or float64"
    ):
        cube_backward(torch.ones(2, dtype=torch.float16), torch.ones(2))


def test_complex_and_non_tensor_inputs_are_refused():
    with pytest.raises(TypeError, match="must be a real tensor"):
        cube(torch.ones(2, dtype=torch.complex128))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        cube([1.0, 2.0])


def test_a_tensor_on_another_device_is_refused():
    with pytest.raises(ValueError, match="must be on the CPU"):
        cube(torch.ones(2, device="meta"))


def test_the_kernel_itself_refuses_what_the_wrappers_refuse(extension):
    # The C++ checks guard callers that bypass the Python wrappers.
    kernels = extension.module
    with pytest.raises(RuntimeError, match="float32 and float64 only, got Half"):
        kernels.cube_kernel(torch.ones(2, dtype=torch.float16))
    with pytest.raises(RuntimeError, match="same dtype, got Float and Double"):
        kernels.cube_backward_kernel(torch.ones(2), torch.ones(2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"same shape, got \[2\] and \[3\]"):
        kernels.cube_backward_kernel(torch.ones(2), torch.ones(3))


def test_non_contiguous_input_gives_the_values_of_its_elements(extension):
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)[:, ::2]
    assert not x.is_contiguous()
    torch.testing.assert_close(cube(x), x**3)
    grad_out = torch.full_like(x, 2.0)
    torch.testing.assert_close(cube_backward(grad_out, x), grad_out * 3 * x**2)


# -- the build cache ---------------------------------------------------------------


def test_a_second_load_comes_from_the_cache_and_finds_the_same_directory(extension):
    again = cpp_extension.build_extension()
    assert again.from_cache
    assert again.directory == extension.directory
    assert again.module.cube(torch.tensor([2.0])).item() == 8.0


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("DOUBLE_BACKWARD_CACHE_DIR", str(tmp_path / "mine"))
    assert cpp_extension.cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("DOUBLE_BACKWARD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cpp_extension.cache_dir() == tmp_path / "xdg" / "double_backward"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cpp_extension.cache_dir() == tmp_path / "home" / ".cache" / "double_backward"


def test_a_changed_source_or_torch_version_gets_another_build_directory(
    monkeypatch, tmp_path
):
    before = cpp_extension.build_directory(tmp_path)
    monkeypatch.setattr(torch, "__version__", "0.0.0+other")
    other_torch = cpp_extension.build_directory(tmp_path)
    monkeypatch.undo()
    changed = tmp_path / "cube.cpp"
    changed.write_bytes(cpp_extension.SOURCE.read_bytes() + b"\n// edited\n")
    monkeypatch.setattr(cpp_extension, "SOURCE", changed)
    other_source = cpp_extension.build_directory(tmp_path)
    assert len({before, other_torch, other_source}) == 3
    assert before.parent == other_torch.parent == tmp_path / "cpp_extension"


# -- a missing compiler --------------------------------------------------------------

INSTALL_HINTS = ("apt-get install -y g++", "xcode-select --install", "conda install")


@pytest.mark.parametrize(
    ("variable", "value", "problem"),
    [
        ("CXX", "/nonexistent/g++", "CXX='/nonexistent/g++' is not an executable"),
        ("CXX", " ", "CXX is set but empty"),
        ("PATH", "", "`c++` was not found on PATH"),
    ],
)
def test_a_missing_compiler_says_how_to_install_one(
    monkeypatch, tmp_path, variable, value, problem
):
    if variable == "PATH":
        monkeypatch.delenv("CXX", raising=False)
        value = str(tmp_path)  # a PATH with no compiler on it
    monkeypatch.setenv(variable, value)
    with pytest.raises(CompilerNotFoundError) as error:
        cpp_extension.build_extension(tmp_path / "empty-cache")
    message = str(error.value)
    assert problem in message
    assert all(hint in message for hint in INSTALL_HINTS)
    assert str(tmp_path / "empty-cache") in message


def test_a_script_without_a_compiler_stops_with_the_message_not_a_build_log(tmp_path):
    script = (
        "import torch\n"
        "from double_backward.functions.cpp_extension import cube\n"
        "cube(torch.ones(2))\n"
    )
    env = {
        **os.environ,
        "CXX": "/nonexistent/c++",
        "DOUBLE_BACKWARD_CACHE_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True
    )
    assert result.returncode != 0
    last_line = result.stderr.strip().splitlines()[-1]
    assert last_line.startswith("(set DOUBLE_BACKWARD_CACHE_DIR")
    assert "CompilerNotFoundError: No C++ compiler" in result.stderr
    assert "sudo apt-get install -y g++" in result.stderr
    # Stopped before torch ran a compiler or ninja: nothing was built.
    assert "ninja" not in result.stderr.lower()
    assert not any(tmp_path.iterdir())


# -- missing Python headers -----------------------------------------------------------


def test_missing_python_headers_say_how_to_install_them(monkeypatch, tmp_path):
    # A Python whose include directory has no Python.h, as on Debian without python3-dev.
    include = tmp_path / "include"
    include.mkdir()
    real_get_paths = cpp_extension.sysconfig.get_paths
    monkeypatch.setattr(
        cpp_extension.sysconfig,
        "get_paths",
        lambda *args, **kwargs: {**real_get_paths(*args, **kwargs), "include": str(include)},
    )
    with pytest.raises(PythonHeadersNotFoundError) as error:
        cpp_extension.build_extension(tmp_path / "empty-cache")
    message = str(error.value)
    assert str(include / "Python.h") in message
    assert "sudo apt-get install -y python3-dev" in message
    assert "dnf install python3-devel" in message
    assert str(tmp_path / "empty-cache") in message
    assert not (tmp_path / "empty-cache").exists()  # stopped before any build


def test_this_pythons_headers_are_where_the_check_looks():
    # The C++ example builds here (the fixture above), so the check must accept this Python.
    assert cpp_extension.python_headers().is_file()


def test_a_cached_build_needs_no_compiler(extension, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    assert cpp_extension.build_extension().from_cache


def test_cxx_naming_an_executable_is_accepted(monkeypatch):
    # torch runs $CXX as given; any executable path passes the check (sys.executable here).
    monkeypatch.setenv("CXX", sys.executable)
    assert cpp_extension._compiler_problem() is None


def test_compiling_after_distutils_was_imported_prints_no_setuptools_warning(tmp_path):
    # The pages import torchviz (which imports distutils) before building the extension;
    # setuptools' shim then warns, but only in a process that compiles, so a page built with
    # an empty cache would read differently from one built with a full cache. The compile is
    # made to fail fast (a missing source) after the imports that warn.
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(f"""
        import warnings
        from pathlib import Path
        import double_backward.graph  # torchviz: distutils first, as on the pages
        from double_backward.functions import cpp_extension
        missing = Path({str(tmp_path / "missing.cpp")!r})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cpp_extension._compile(Path({str(tmp_path / "build")!r}), "probe", missing)
            except FileNotFoundError:
                pass
        print([str(w.message) for w in caught if "istutils" in str(w.message)])
    """))  # fmt: skip
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# -- a reader's own source (the downloads' editable cube.cpp) ------------------------


def test_the_packages_source_given_as_text_is_the_same_cached_build(extension):
    # The downloads hold cube.cpp as a string; unedited, it must not compile again.
    text = cpp_extension.SOURCE.read_text()
    assert cpp_extension.build_directory(source=text) == extension.directory
    assert cpp_extension.build_directory(source=text + "// edited\n") != (
        extension.directory
    )
    build = cpp_extension.build_extension(source=text)
    assert build.from_cache and build.directory == extension.directory


def test_a_source_given_to_load_extension_becomes_the_process_extension(
    extension, monkeypatch
):
    monkeypatch.setattr(cpp_extension, "_loaded", [extension])
    given = cpp_extension.load_extension(source=cpp_extension.SOURCE.read_text())
    assert given is not extension  # built (here: found in the cache) for that source
    assert cpp_extension.load_extension() is given
    assert cube(torch.tensor([2.0], dtype=torch.float64)).item() == 8.0


def test_a_source_that_is_not_text_is_refused():
    with pytest.raises(TypeError, match="C\\+\\+ source as a str, got PosixPath"):
        cpp_extension.build_extension(source=cpp_extension.SOURCE)
