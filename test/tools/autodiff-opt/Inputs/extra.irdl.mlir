// An extra IRDL dialect for --irdl-file tests: `extra.pair` takes two operands
// of one type and returns a value of that same type.
irdl.dialect @extra {
  irdl.operation @pair {
    %t = irdl.any
    irdl.operands(lhs: %t, rhs: %t)
    irdl.results(out: %t)
  }
}
