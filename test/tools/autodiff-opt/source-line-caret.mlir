// Diagnostics look as mlir-opt prints them (llvm::SourceMgr): the location,
// the source line with tabs expanded, a caret under the column (none on a
// line with non-ASCII characters), and each note with its own source line
// where its location differs from the one before.
//
// RUN: %not autodiff-opt %s --split-input-file 2> %t.ours
// RUN: %not %mlir_opt %s --split-input-file 2> %t.upstream
// RUN: diff %t.ours %t.upstream
// RUN: filecheck %s < %t.ours

// CHECK:      source-line-caret.mlir:[[# @LINE + 10]]:2: error: redefinition of symbol named 'f'
// CHECK-NEXT: {{^}}        func.func @f() {{[{]}}{{$}}
// CHECK-NEXT: {{^}}        ^{{$}}
// CHECK-NEXT: source-line-caret.mlir:[[# @LINE + 7]]:2: note: see current operation:
// CHECK:      source-line-caret.mlir:[[# @LINE + 3]]:1: note: see existing symbol definition here
// CHECK-NEXT: {{^}}func.func @f() {{[{]}}{{$}}
// CHECK-NEXT: {{^}}^{{$}}
func.func @f() {
  return
}
	func.func @f() {
  return
}

// -----

// CHECK:      source-line-caret.mlir:[[# @LINE + 4]]:3: error: 'func.return' op has 0 operands, but enclosing function (@g) returns 1
// CHECK-NEXT: {{^}}  "func.return"() {s = "π"} : () -> (){{$}}
// CHECK-NEXT: note: see current operation
func.func @g() -> i32 {
  "func.return"() {s = "π"} : () -> ()
}

// -----

// CHECK:      source-line-caret.mlir:[[# @LINE + 3]]:24: error: expected operation name in quotes
// CHECK-NEXT: {{^}}func.func @h() { return{{$}}
// CHECK-NEXT: {{^}}                       ^{{$}}
func.func @h() { return
