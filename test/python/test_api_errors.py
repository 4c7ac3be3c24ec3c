"""API misuse ends in the front end's own errors, naming the argument (issue 25 item 4).

Each case used to end in an internal exception (OverflowError from a
conversion, the user's lambda's own TypeError raised from inside the library,
AttributeError) or, worse, was accepted (a string returned from a jitted
function became `array('abc')`).
"""

from __future__ import annotations

import dataclasses
import traceback

import numpy as np
import pytest

import mlir_autodiff as ad


def _raised_from_user_line(err: BaseException) -> bool:
    """The error's traceback passes through this test file (the user's code)."""
    return any(fr.filename == __file__ for fr in traceback.extract_tb(err.__traceback__))


def test_python_int_beyond_int64_names_the_argument():
    with pytest.raises(ad.InvalidArgumentError, match=r"argument leaf 1: the Python int "
                       r"1180591620717411303424 does not fit in int64") as info:
        ad.jit(lambda x, n: x + n)(1.0, 2**70)
    assert isinstance(info.value, TypeError) and _raised_from_user_line(info.value)
    assert ad.jit(lambda x, n: x + n)(1.0, 2**62) == 1.0 + 2**62


def test_jit_of_a_non_function_fails_at_once():
    with pytest.raises(ad.InvalidArgumentError, match="jit: expected a function, got a value "
                       "of type int"):
        ad.jit(3)


def test_wrong_number_of_arguments_is_ours_not_the_functions():
    def f(x, y):
        return x * y

    with pytest.raises(ad.InvalidArgumentError, match=r"jit\(f\): the call does not fit the "
                       r"function's signature \(x, y\): missing a required argument: 'y'"):
        ad.jit(f)(1.0)
    with pytest.raises(ad.InvalidArgumentError, match="too many positional arguments"):
        ad.jit(f)(1.0, 2.0, 3.0)
    with pytest.raises(ad.InvalidArgumentError, match="unexpected keyword argument 'z'"):
        ad.jit(f)(1.0, 2.0, z=3.0)
    # wrappers with *args/**kwargs (grad, vmap) still pass their arguments through
    assert ad.jit(ad.grad(f))(3.0, 2.0) == 2.0


def test_tracer_tolist_item_and_hash_are_tracer_errors():
    x = np.ones(3)
    with pytest.raises(ad.TracerArrayConversionError, match=r"\.tolist\(\)") as info:
        ad.jit(lambda v: v.tolist())(x)
    assert "test_api_errors.py" in str(info.value)  # the user's line
    with pytest.raises(ad.ConcretizationTypeError, match=r"\.item\(\)"):
        ad.jit(lambda v: v.sum().item())(x)
    with pytest.raises(ad.ConcretizationTypeError, match="unhashable type") as info:
        ad.jit(lambda v: hash(v))(x)
    assert "test_api_errors.py" in str(info.value)


@dataclasses.dataclass
class Params:
    w: object


@pytest.mark.parametrize("out, what", [("abc", "str"), (Params(1.0), "Params"),
                                       (object(), "object"), (1j, "complex")])
def test_outputs_that_are_not_arrays_are_refused(out, what):
    with pytest.raises(ad.InvalidArgumentError,
                       match=rf"output leaf 0 is a value of type {what}, not an array"):
        ad.jit(lambda x: out)(np.ones(2))


def test_traced_dataclass_output_is_refused_with_its_type():
    with pytest.raises(ad.InvalidArgumentError, match="type Params"):
        ad.jit(lambda x: Params(x))(np.ones(2))


def test_arguments_that_are_not_arrays():
    with pytest.raises(ad.InvalidArgumentError, match="a value of type object is not a valid "
                       "jit argument"):
        ad.jit(lambda x: x)(object())
    with pytest.raises(ad.InvalidArgumentError, match="type str"):
        ad.jit(lambda x: x)("abc")


def test_constant_outputs_still_work():
    out = ad.jit(lambda x: (x, 2, 3.5, True, np.arange(3, dtype=np.int32)))(np.ones(1))
    assert out[1] == 2 and out[2] == 3.5 and out[3] is not None
    np.testing.assert_array_equal(out[4], [0, 1, 2])
