// The `autodiff` dialect, defined in IRDL.
//
// Stock upstream tools load it with `mlir-opt --irdl-file=<this file>`; the
// Python package loads it with `mlir.dialects.irdl.load_dialects`.
//
// IRDL ops cannot be terminators, so no op here has a region: a transform
// names the function it acts on by symbol (`fn = @f`), as Enzyme's and
// Catalyst's ops do.
//
// Notes on IRDL as implemented in MLIR 22, which shape this file:
//  * A constraint variable (an SSA value here) is unified across every use,
//    so two operands constrained by the same `%v` must have the same type.
//    Every independent position therefore gets its own constraint op.
//  * `irdl.base "!builtin.tensor"` cannot appear under `irdl.any_of` (the
//    loader aborts), so "tensor or scalar" positions are `irdl.any`; the
//    passes check element types and arities against the callee.
//  * IRDL has no optional attributes. Optional ones (`wrt` on vjp; `low`,
//    `high`, `mean`, `std`, `dtype` on random and philox) are not listed and
//    are checked by the passes that consume them.
irdl.dialect @autodiff {
  // Forward mode: (primals..., tangents...) -> (outputs..., output tangents...).
  irdl.operation @jvp {
    %fn = irdl.base "#builtin.symbol_ref"
    %args = irdl.any
    %res = irdl.any
    irdl.attributes {"fn" = %fn}
    irdl.operands(args: variadic %args)
    irdl.results(res: variadic %res)
  }

  // Reverse mode: (primals..., output cotangents...)
  //   -> (outputs..., cotangents of the `wrt` inputs...).
  // `wrt = array<i64: ...>` is optional (default: every float input).
  irdl.operation @vjp {
    %fn = irdl.base "#builtin.symbol_ref"
    %args = irdl.any
    %res = irdl.any
    irdl.attributes {"fn" = %fn}
    irdl.operands(args: variadic %args)
    irdl.results(res: variadic %res)
  }

  // Batching: args -> results, batch axis per argument and result (-1: not batched).
  irdl.operation @vmap {
    %fn = irdl.base "#builtin.symbol_ref"
    %in_axes = irdl.base "#builtin.dense_array"
    %out_axes = irdl.base "#builtin.dense_array"
    %error = irdl.is "error"
    %different = irdl.is "different"
    %same = irdl.is "same"
    %randomness = irdl.any_of(%error, %different, %same)
    %args = irdl.any
    %res = irdl.any
    irdl.attributes {
      "fn" = %fn,
      "in_axes" = %in_axes,
      "out_axes" = %out_axes,
      "randomness" = %randomness
    }
    irdl.operands(args: variadic %args)
    irdl.results(res: variadic %res)
  }

  // Identity with a zero derivative.
  irdl.operation @stop_gradient {
    %t = irdl.any
    irdl.operands(x: %t)
    irdl.results(y: %t)
  }

  // A call whose internals are recomputed in the backward pass, not saved.
  irdl.operation @checkpoint {
    %fn = irdl.base "#builtin.symbol_ref"
    %args = irdl.any
    %res = irdl.any
    irdl.attributes {"fn" = %fn}
    irdl.operands(args: variadic %args)
    irdl.results(res: variadic %res)
  }

  // A draw from the implicit generator (stateful, like torch.rand).
  irdl.operation @random {
    %uniform = irdl.is "uniform"
    %normal = irdl.is "normal"
    %bits = irdl.is "bits"
    %distribution = irdl.any_of(%uniform, %normal, %bits)
    %out = irdl.base "!builtin.tensor"
    irdl.attributes {"distribution" = %distribution}
    irdl.results(out: %out)
  }

  // A functional draw: counter-based Philox4x32-10 at (seed, offset).
  irdl.operation @philox {
    %uniform = irdl.is "uniform"
    %normal = irdl.is "normal"
    %bits = irdl.is "bits"
    %distribution = irdl.any_of(%uniform, %normal, %bits)
    %seed = irdl.is i64
    %offset = irdl.is i64
    %out = irdl.base "!builtin.tensor"
    irdl.attributes {"distribution" = %distribution}
    irdl.operands(seed: %seed, offset: %offset)
    irdl.results(out: %out)
  }
}
