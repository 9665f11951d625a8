/* Whether every element of a CPU tensor is 0, 1 or -1 (NeuroBench's ternary input check,
 * capture/ops/op_statistics.py _ternary), by bit pattern: the value with its sign bit masked (for
 * floats) is zero or the pattern of 1, or (signed integers) the value is all ones. Exactly what
 * `(x == 0) | (x.abs() == 1)` says for every value (-0.0 is 0, NaN and inf are neither), in
 * one pass that stops at the first other value: most analog tensors stop at their first
 * element, where the Python path runs five small ops. */
#include "scan/scan.h"

/* Elements a contiguous line is checked in at a time: the compiler vectorises a block (no exit
 * inside it), and a tensor with another value still stops within its first block. */
#define TERNARY_BLOCK 256

/* 1 when every element of the line is 0, 1 or (allowed) all ones, else 0. A contiguous line
 * goes block by block, an "other value" flag OR-ed over the block's lanes; the rest (a strided
 * line, a contiguous line's tail) element by element. Where -1 is not allowed, `all` is 0,
 * which the zero test already admits. */
#define DEFINE_LINE(NAME, TYPE)                                                                         \
    VECTOR_CLONES static int NAME(const char *base, int64_t n, int64_t step, uint64_t mask, uint64_t one, \
                                  int minus_one_allowed) {                                             \
        const TYPE *p = (const TYPE *)base;                                                            \
        const TYPE m = (TYPE)mask, o = (TYPE)one, all = minus_one_allowed ? (TYPE)~(TYPE)0 : (TYPE)0;   \
        int64_t i = 0;                                                                                 \
        if (step == 1)                                                                                 \
            for (; i + TERNARY_BLOCK <= n; i += TERNARY_BLOCK) {                                       \
                TYPE other = 0;                                                                        \
                for (int64_t j = i; j < i + TERNARY_BLOCK; j++) {                                      \
                    TYPE v = p[j], masked = v & m;                                                     \
                    other |= (TYPE)((masked != 0) & (masked != o) & (v != all));                       \
                }                                                                                      \
                if (other) return 0;                                                                   \
            }                                                                                          \
        for (; i < n; i++) {                                                                           \
            TYPE v = p[i * step], masked = v & m;                                                       \
            if (masked != 0 && masked != o && v != all) return 0;                                      \
        }                                                                                              \
        return 1;                                                                                      \
    }
DEFINE_LINE(line_8, uint8_t)
DEFINE_LINE(line_16, uint16_t)
DEFINE_LINE(line_32, uint32_t)
DEFINE_LINE(line_64, uint64_t)

static int line(const char *base, int size, int64_t n, int64_t step, uint64_t mask, uint64_t one, int minus_one) {
    switch (size) {
    case 1: return line_8(base, n, step, mask, one, minus_one);
    case 2: return line_16(base, n, step, mask, one, minus_one);
    case 4: return line_32(base, n, step, mask, one, minus_one);
    default: return line_64(base, n, step, mask, one, minus_one);
    }
}

/* ternary(address, element_size, mask, one_bits, minus_one_allowed, shape, strides) -> bool;
 * strides in elements. */
PyObject *native_ternary(PyObject *Py_UNUSED(self), PyObject *args) {
    unsigned long long address, mask, one;
    long long size;
    int minus_one;
    PyObject *shape_object, *strides_object;
    if (!PyArg_ParseTuple(args, "KLKKpOO:ternary", &address, &size, &mask, &one, &minus_one, &shape_object,
                          &strides_object))
        return NULL;
    int64_t shape[MAX_DIMS], steps[MAX_DIMS], index[MAX_DIMS] = {0}, numel;
    Py_ssize_t ndim;
    if (read_layout("ternary", shape_object, strides_object, shape, steps, &ndim, &numel) < 0) return NULL;
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_ValueError, "ternary: element size %lld", size);
        return NULL;
    }
    if (numel == 0) Py_RETURN_TRUE;
    if (address == 0) {
        PyErr_SetString(PyExc_ValueError, "ternary: null address");
        return NULL;
    }
    int64_t inner = ndim ? shape[ndim - 1] : 1, inner_step = ndim ? steps[ndim - 1] : 1;
    Py_ssize_t outer_dims = ndim ? ndim - 1 : 0;
    int all = 1;
    for (;;) { /* every line along the last dimension, the outer index counted like an odometer */
        int64_t offset = 0;
        for (Py_ssize_t d = 0; d < outer_dims; d++) offset += index[d] * steps[d];
        if (!line((const char *)(uintptr_t)address + offset * size, (int)size, inner, inner_step, mask, one,
                  minus_one)) {
            all = 0;
            break;
        }
        Py_ssize_t d = outer_dims - 1;
        while (d >= 0 && ++index[d] == shape[d]) index[d--] = 0;
        if (d < 0) break;
    }
    return PyBool_FromLong(all);
}
