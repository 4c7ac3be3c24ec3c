"""Per-op rules of the transformations: one home per op, JAX style.

Each dialect module registers, side by side, an op's forward-mode rule
(jvp), its reverse-mode rule (vjp) and its batching rule (vmap):

    arith.py              arith: one-line `defjvp` partials; every op `defvectorized`
    math.py               math: the same
    linalg.py             named linalg ops: map, reduce, elementwise named ops,
                          fill, copy, transpose, broadcast, contractions (matmul ...)
    linalg_conv.py        linalg.conv_2d_nhwc_hwcf (every derivative again that op)
    linalg_pool.py        linalg.pooling_nhwc_sum (the same), linalg.pooling_nhwc_max
    linalg_generic.py     linalg.generic
    linalg_reductions.py  reductions inside a generic (the max/min/product weights
                          that linalg_generic.py's rules use)
    tensor.py             tensor
    scf.py                scf.for, scf.if, scf.execute_region
    scf_while.py          scf.while
    func.py               func.call
    shard.py              the shard dialect's collectives (all_reduce, all_gather,
                          reduce_scatter, shift)
    autodiff.py           the autodiff dialect's own ops (stop_gradient, checkpoint,
                          random, philox)

Shared modules, imported by the dialect modules (never the other way round):

    registry.py    the jvp/vjp registries, their combinators (`defjvp`, `deflinear`,
                   `defzero` ...), `USES_RESULT` (filled by `defjvp(...,
                   uses_result=True)`) and `load_all`
    batching.py    the batching registry (`defbatch`, `rule_for`: no default rule),
                   `BatchBuilder` and the combinators `defvectorized`, `defstructured`
    structured.py  indexing maps and iterators of linalg ops, `make_generic`, sums,
                   transposes, static slices and reshapes
    regions.py     moving and cloning blocks, recomputation in a nested reverse pass,
                   the tapes of reverse-mode loops

Layout rule: a dialect's rules stay in `<dialect>.py` until it passes 800
lines; then it is split by op family (`<dialect>_<family>.py`), each op's three
rules staying together. Helpers used by more than one module go to the shared
modules under a public name.

The drivers read the registries: `ad_modes.py` (the sweeps of `ad_driver.py`,
`--autodiff-jvp`, `--autodiff-vjp`) looks up `JVP_RULES`/`VJP_RULES`, `vmap.py`
(`--autodiff-vmap`) calls `batching.rule_for`; an op without a rule is a
diagnostic naming it ("no forward rule", "no reverse rule", "no batching rule").
Rules register when their module is imported (`registry.load_all`).

Tests: `test/python/test_rule_registry_exec.py` runs one case per registered
op (`rule_cases.py`) through every rule and checks it numerically;
`test/python/test_rules_registries.py` checks that the registries agree.
"""
