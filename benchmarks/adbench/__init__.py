"""Real AD benchmark problems (ADBench, GradBench): loaders and objectives.

Objectives are written once against a numpy-like module `xp` (numpy,
`mlir_autodiff.numpy` or `jax.numpy`), so the same source is the reference,
the traced program and the JAX oracle.
"""
