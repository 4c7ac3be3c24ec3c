// A broken IRDL file for --irdl-file tests: the operation is never closed.
irdl.dialect @broken {
  irdl.operation @op {
    %t = irdl.any
