/* Bounded safetensors reader. The file is mapped read-only (base/mapfile.h); tensors are views into
 * the mapping, nothing is copied.
 *
 * Format: u64 little-endian header length N, N bytes of JSON header, then the data area. The
 * header is an object: "__metadata__" (optional, an object of strings) and, per tensor,
 * {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]} with offsets relative to the data
 * area. Checked: 8 <= file size; N <= 100 MB and N <= file size - 8; the header is JSON and an
 * object; every dtype known (sub-byte dtypes refused); ndim <= CLEF_MAX_DIMS; shape entries are
 * non-negative integers whose product (and byte size) does not overflow; begin <= end <= data
 * size; end - begin == numel * dtype size; no two tensors share a byte. Every error is BadModel
 * naming the file and the tensor. */
#ifndef CLEF_MODEL_SAFETENSORS_H
#define CLEF_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "compute/tensor.h"

#define CLEF_ST_MAX_HEADER (100u * 1000u * 1000u) /* 100 MB */

/* Element size in bytes (0 for an unknown dtype) and the safetensors name ("BF16", "F32", ...;
 * "?" when unknown). */
size_t clef_dtype_size(int dtype);
const char *clef_dtype_name(int dtype);
/* Parses a safetensors dtype name; returns 0 when unknown. */
int clef_dtype_from_name(const char *s, size_t len);

typedef struct clef_st_file clef_st_file;

/* Maps and validates `path`. NULL with err set (IoError / BadModel / OutOfMemory) on failure. */
clef_st_file *clef_st_open(const char *path, clef_err *err);
/* Validates a safetensors image already in memory (`bytes` must outlive the result; nothing is
 * copied). `label` names the file in messages. Used by clef_st_open, tests and the fuzzer. */
clef_st_file *clef_st_parse(const void *bytes, size_t len, const char *label, clef_err *err);
void clef_st_close(clef_st_file *f);

size_t clef_st_count(const clef_st_file *f);
/* Tensors in header order. */
const clef_tensor *clef_st_at(const clef_st_file *f, size_t i);
/* Exact-name lookup (binary search); NULL when absent. */
const clef_tensor *clef_st_find(const clef_st_file *f, const char *name);
/* The "__metadata__" value for `key`, or NULL. */
const char *clef_st_metadata(const clef_st_file *f, const char *key);
const char *clef_st_label(const clef_st_file *f);
/* The whole file image (mapping) and its size. */
const void *clef_st_bytes(const clef_st_file *f, size_t *size);
/* Drops this process's pages of bytes [p, p + n) of the file (the whole pages inside the range;
 * base/mapfile.h clef_mapfile_release) when f was opened with clef_st_open (a file mapping) and
 * the range lies inside it; a later read faults them back in from the page cache. A file parsed
 * from caller memory (clef_st_parse) is never touched: there the bytes may be anonymous memory,
 * which MADV_DONTNEED would replace with zeros. Returns the bytes released. */
size_t clef_st_release(const clef_st_file *f, const void *p, size_t n);

#endif
