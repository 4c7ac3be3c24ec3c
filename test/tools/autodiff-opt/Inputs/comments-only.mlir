// Nothing but comments: mlir-opt makes this an empty module.

// expected-error is not a designator here: there is no {{...}} on this line
