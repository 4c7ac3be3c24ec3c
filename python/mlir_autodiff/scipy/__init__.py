"""`mlir_autodiff.scipy`: scipy's names, traced like `mlir_autodiff.numpy`.

Submodules are imported on use (`import mlir_autodiff.scipy.linalg`); this
package imports nothing itself.
"""
