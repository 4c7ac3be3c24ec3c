// A public function with a dynamically shaped result: the caller cannot
// allocate its buffer, so the CPU lowering rejects it.
func.func @main(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}
