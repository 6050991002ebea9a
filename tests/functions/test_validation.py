"""Bad input: rejected at least as clearly as native torch; accepted input matches native."""

from __future__ import annotations

import pytest
import torch

from double_backward import Cube, CubeBackward, Exp, Sinh, SinhBad, Square

from ..helpers import ANY_DTYPE_FUNCTIONS, CORRECT_FUNCTIONS

NAMED_FUNCTIONS = [Square, Exp, Sinh, SinhBad, Cube]


@pytest.mark.parametrize("function", NAMED_FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize(
    "bad", [[1.0, 2.0], "1.0", 3.0, None], ids=["list", "str", "float", "None"]
)
def test_non_tensor_input_is_rejected_naming_the_function_and_the_expected_type(
    function, bad
):
    with pytest.raises(TypeError) as error:
        function.apply(bad)
    message = str(error.value)
    assert message.startswith(
        f"{function.__name__}: argument 'x' must be a torch.Tensor"
    )
    assert f"got {type(bad).__name__}" in message


@pytest.mark.parametrize(("ours", "native"), CORRECT_FUNCTIONS)
def test_native_also_rejects_a_list_with_type_error(ours, native):
    # The parity the message above is measured against: native raises the same exception type.
    with pytest.raises(TypeError):
        native([1.0, 2.0])


def test_cube_backward_names_the_offending_argument():
    with pytest.raises(
        TypeError, match="CubeBackward: argument 'grad_out' must be a torch.Tensor"
    ):
        CubeBackward.apply([1.0], torch.ones(1))
    with pytest.raises(
        TypeError, match="CubeBackward: argument 'x' must be a torch.Tensor"
    ):
        CubeBackward.apply(torch.ones(1), "x")


@pytest.mark.parametrize("function", NAMED_FUNCTIONS, ids=lambda f: f.__name__)
def test_complex_input_is_rejected_instead_of_getting_unconjugated_gradients(function):
    with pytest.raises(
        TypeError, match="must be a real tensor, got dtype torch.complex64"
    ):
        function.apply(torch.ones(2, dtype=torch.complex64))


@pytest.mark.parametrize(("ours", "native"), ANY_DTYPE_FUNCTIONS)
@pytest.mark.parametrize(
    "make_x",
    # A float tensor that simply does not require grad; an int tensor, which never can.
    [lambda: torch.tensor([1.0, 2.0]), lambda: torch.tensor([1, 2])],
    ids=["float-without-grad", "int"],
)
def test_asking_grad_of_a_tensor_that_does_not_require_grad_fails_like_native(
    ours, native, make_x
):
    x = make_x()
    errors = []
    for fn in (ours, native):
        with pytest.raises(RuntimeError) as error:
            torch.autograd.grad(fn(x).sum(), x)
        errors.append(str(error.value))
    assert errors[0] == errors[1]
    assert "does not require grad" in errors[0]


@pytest.mark.parametrize(("ours", "native"), ANY_DTYPE_FUNCTIONS)
@pytest.mark.parametrize(
    "dtype",
    [
        torch.int64,
        torch.int32,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
    ],
)
def test_accepted_dtypes_give_the_native_result_and_dtype(ours, native, dtype):
    x = torch.tensor([0, 1, -2, 3], dtype=dtype)
    got, expected = ours(x), native(x)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected)
