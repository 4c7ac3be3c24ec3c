/* Runtime support for exported CPU artifacts (ad.export).
 *
 * The lowered host code calls a few functions that the JIT finds in MLIR's
 * libmlir_c_runner_utils; an artifact must run without MLIR, so they are
 * defined here and linked into every artifact. Today that is `memrefCopy`
 * (what `memref.copy` of non-contiguous memrefs lowers to).
 */
#include <stdint.h>
#include <string.h>

/* An unranked memref as the LLVM lowering passes it: the rank and a pointer
 * to the ranked descriptor {allocated, aligned, offset, sizes[rank],
 * strides[rank]}. */
typedef struct {
  int64_t rank;
  void *descriptor;
} UnrankedMemRef;

typedef struct {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t sizes_and_strides[]; /* sizes[rank], then strides[rank] */
} RankedMemRef;

__attribute__((visibility("default"))) void memrefCopy(int64_t elem_size,
                                                       UnrankedMemRef *src,
                                                       UnrankedMemRef *dst) {
  const RankedMemRef *s = (const RankedMemRef *)src->descriptor;
  const RankedMemRef *d = (const RankedMemRef *)dst->descriptor;
  int64_t rank = src->rank;
  const int64_t *sizes = s->sizes_and_strides;
  const int64_t *s_strides = s->sizes_and_strides + rank;
  const int64_t *d_strides = d->sizes_and_strides + rank;
  char *sp = s->aligned + s->offset * elem_size;
  char *dp = d->aligned + d->offset * elem_size;
  int64_t total = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (sizes[i] == 0)
      return;
    total *= sizes[i];
  }
  /* Contiguous row-major on both sides: one memcpy. */
  int contiguous = 1;
  int64_t expect = 1;
  for (int64_t i = rank - 1; i >= 0; --i) {
    if (sizes[i] != 1 && (s_strides[i] != expect || d_strides[i] != expect))
      contiguous = 0;
    expect *= sizes[i];
  }
  if (contiguous) {
    memmove(dp, sp, (size_t)(total * elem_size));
    return;
  }
  /* General strides: an odometer over the indices. */
  int64_t index[64] = {0};
  if (rank > 64)
    return; /* not produced by our lowering */
  for (int64_t n = 0; n < total; ++n) {
    int64_t so = 0, doff = 0;
    for (int64_t i = 0; i < rank; ++i) {
      so += index[i] * s_strides[i];
      doff += index[i] * d_strides[i];
    }
    memcpy(dp + doff * elem_size, sp + so * elem_size, (size_t)elem_size);
    for (int64_t i = rank - 1; i >= 0; --i) {
      if (++index[i] < sizes[i])
        break;
      index[i] = 0;
    }
  }
}
