"""mlir-autodiff: a differentiable compiler on upstream MLIR."""
