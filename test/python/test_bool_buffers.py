"""BoolBuffersToBytes (transforms/bufferize.py): every i1 buffer becomes an i8 one, wherever
the buffer comes from, while the ops it skips for speed (arithmetic, vector and LLVM ops,
terminators) are left alone."""

from __future__ import annotations

import re

import numpy as np
from mlir import ir

import mlir_autodiff as ad
from mlir_autodiff import dialects
from mlir_autodiff import numpy as anp
from mlir_autodiff.transforms.bufferize import BoolBuffersToBytes

#: i1 buffers from each kind of op that can yield one: a function argument, an
#: allocation, a global, a view, a select between two buffers, a loop's iter_args
#: and results, a call's result; with i1 loads and stores in a loop and next to
#: vector code on f32 buffers.
MODULE = """
memref.global "private" constant @mask : memref<4xi1> = dense<[true, false, true, true]>
func.func private @pick(%a: memref<4xi1>) -> memref<4xi1> {
  return %a : memref<4xi1>
}
func.func @main(%arg: memref<4xi1>, %f: memref<8xf32>, %out: memref<4xi1>, %c: i1) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %g = memref.get_global @mask : memref<4xi1>
  %a = memref.alloc() : memref<4xi1>
  %s = arith.select %c, %g, %arg : memref<4xi1>
  %v = memref.subview %a[0] [2] [1] : memref<4xi1> to memref<2xi1, strided<[1]>>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%b = %s) -> (memref<4xi1>) {
    %x = memref.load %b[%i] : memref<4xi1>
    %y = arith.xori %x, %c : i1
    memref.store %y, %a[%i] : memref<4xi1>
    scf.yield %a : memref<4xi1>
  }
  %p = func.call @pick(%r) : (memref<4xi1>) -> memref<4xi1>
  %e = memref.load %v[%c1] : memref<2xi1, strided<[1]>>
  memref.store %e, %out[%c0] : memref<4xi1>
  %w = vector.load %f[%c0] : memref<8xf32>, vector<8xf32>
  %w2 = arith.addf %w, %w : vector<8xf32>
  vector.store %w2, %f[%c0] : memref<8xf32>, vector<8xf32>
  %q = memref.load %p[%c1] : memref<4xi1>
  memref.store %q, %out[%c1] : memref<4xi1>
  memref.dealloc %a : memref<4xi1>
  return
}
"""


def test_every_i1_buffer_becomes_bytes() -> None:
    ctx = ir.Context()
    dialects.load(ctx)
    with ctx, ir.Location.unknown():
        module = ir.Module.parse(MODULE)
        BoolBuffersToBytes().apply(module.operation)
        module.operation.verify()
        text = str(module)
    assert not re.search(r"memref<[^>]*xi1[,>]", text), text
    assert "memref<4xi1>" not in text and "vector<8xf32>" in text
    assert "memref<4xi8> = dense<[1, 0, 1, 1]>" in text  # the global and its initial value
    # each i1 load truncates the byte it reads; each i1 store widens what it writes
    assert text.count("arith.trunci") == 3 and text.count("arith.extui") == 3


def test_masks_kept_in_buffers_compute_as_numpy() -> None:
    # a comparison kept as a result (a bool buffer) and a mask used by the gradient
    x = np.linspace(-1.0, 1.0, 64).reshape(8, 8)
    mask, total = ad.jit(lambda v: (v > 0.1, anp.sum(anp.where(v > 0.1, v * v, -v))))(x)
    np.testing.assert_array_equal(mask, x > 0.1)
    np.testing.assert_allclose(total, np.sum(np.where(x > 0.1, x * x, -x)), rtol=1e-12)
    grad = ad.jit(ad.grad(lambda v: anp.sum(anp.maximum(v, 0.0) ** 2)))(x)
    np.testing.assert_allclose(grad, 2.0 * np.maximum(x, 0.0), rtol=1e-12)
