/* The weight tensor view every layer shares: a dtype, a shape and a pointer to row-major data
 * (for the release's weights, a view into the mapped safetensors file: model/safetensors.h reads
 * them; compute/ops.h takes them). Storage dtypes carry the safetensors names (clef_dtype_name). */
#ifndef CLEF_COMPUTE_TENSOR_H
#define CLEF_COMPUTE_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#define CLEF_MAX_DIMS 8

/* Storage dtypes (safetensors names in clef_dtype_name). */
enum {
    CLEF_ST_BOOL = 1,
    CLEF_ST_U8,
    CLEF_ST_I8,
    CLEF_ST_F8_E4M3,
    CLEF_ST_F8_E5M2,
    CLEF_ST_F8_E8M0,
    CLEF_ST_I16,
    CLEF_ST_U16,
    CLEF_ST_F16,
    CLEF_ST_BF16,
    CLEF_ST_I32,
    CLEF_ST_U32,
    CLEF_ST_F32,
    CLEF_ST_I64,
    CLEF_ST_U64,
    CLEF_ST_F64,
};

struct clef_prepared; /* compute/ops.h */

/* A view of one tensor (for a checkpoint: inside its mapped file). Row-major, contiguous; `data` points into the
 * mapping (valid until the file is closed) and may be NULL only for an empty tensor. Unused
 * shape entries (>= ndim) are 0. A zeroed clef_tensor (data == NULL, name == NULL) means "not
 * bound". The data is aligned to the element size when the file was written by the safetensors
 * library (header padded to 8 bytes); the model binder (weights.h) checks this. `prep` is NULL
 * in the file's views; the model sets it on its own bound copy when a backend prepared the
 * tensor (ops->prepare_weight: e.g. the weights in a kernel's layout) and frees it on close. */
typedef struct clef_tensor {
    const void *data;
    struct clef_prepared *prep;   /* a backend's form of the tensor, or NULL (model/weights.h) */
    int dtype;                    /* CLEF_ST_* */
    int ndim;                     /* 0 .. CLEF_MAX_DIMS (0 = a scalar, numel 1) */
    int64_t shape[CLEF_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    const char *name;             /* owned by the file */
} clef_tensor;

#endif
