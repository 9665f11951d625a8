/* The nonzero-pair count of a matrix product, for capture/ops/op_statistics.py _gemm_pairs:
 * sum over batch b and inner index k of nnz(x[b, :, k]) * nnz(y[b, k, :]), the (nonzero x,
 * nonzero y) pairs x @ y multiplies. In Python it is a compare, a cast and a sum per operand
 * and a product; here one pass over each operand.
 *
 * "Nonzero" is by bit pattern, as scan/scan.c's scan: the value with its sign bit (for
 * floats) masked is not all zeros, which is what `x != 0` says for every value (-0.0 is zero,
 * NaN is not). The counts are integers, so the result is exact (the Python path's float64
 * sum is exact too while it stays below 2**53). */
#include "scan/scan.h"

/* counts[k] += the nonzeros of line k of a 2-D view (kept axis k, reduced axis r), read in
 * memory order: the kept axis inner where its stride is the smaller (a row-major x, counted
 * per column), else the reduced axis inner with one counter (a row-major y, counted per row).
 * One function per element width, so each inner loop is a plain compare-and-add. */
#define DEFINE_COUNT(NAME, TYPE)                                                                        \
    VECTOR_CLONES static void NAME(const char *base, uint64_t mask, int64_t kept, int64_t kept_step, int64_t reduced, \
                     int64_t reduced_step, int64_t *counts) {                                         \
        const TYPE m = (TYPE)mask;                                                                   \
        int64_t ks = kept_step / (int64_t)sizeof(TYPE), rs = reduced_step / (int64_t)sizeof(TYPE);   \
        const TYPE *p = (const TYPE *)base;                                                          \
        if ((ks < 0 ? -ks : ks) <= (rs < 0 ? -rs : rs)) {                                            \
            for (int64_t r = 0; r < reduced; r++) {                                                  \
                const TYPE *line = p + r * rs;                                                        \
                if (ks == 1)                                                                          \
                    for (int64_t k = 0; k < kept; k++) counts[k] += (line[k] & m) != 0;               \
                else                                                                                  \
                    for (int64_t k = 0; k < kept; k++) counts[k] += (line[k * ks] & m) != 0;          \
            }                                                                                         \
        } else {                                                                                      \
            for (int64_t k = 0; k < kept; k++) {                                                      \
                const TYPE *line = p + k * ks;                                                        \
                int64_t c = 0;                                                                        \
                if (rs == 1)                                                                          \
                    for (int64_t r = 0; r < reduced; r++) c += (line[r] & m) != 0;                    \
                else                                                                                  \
                    for (int64_t r = 0; r < reduced; r++) c += (line[r * rs] & m) != 0;               \
                counts[k] += c;                                                                       \
            }                                                                                         \
        }                                                                                             \
    }
DEFINE_COUNT(count_8, uint8_t)
DEFINE_COUNT(count_16, uint16_t)
DEFINE_COUNT(count_32, uint32_t)
DEFINE_COUNT(count_64, uint64_t)

static void count_lines(const char *base, int size, uint64_t mask, int64_t kept, int64_t kept_step, int64_t reduced,
                        int64_t reduced_step, int64_t *counts) {
    switch (size) {
    case 1: count_8(base, mask, kept, kept_step, reduced, reduced_step, counts); break;
    case 2: count_16(base, mask, kept, kept_step, reduced, reduced_step, counts); break;
    case 4: count_32(base, mask, kept, kept_step, reduced, reduced_step, counts); break;
    default: count_64(base, mask, kept, kept_step, reduced, reduced_step, counts); break;
    }
}

/* count_lines shared among the threads of torch's OpenMP runtime (scan/parallel.c) for a
 * large view: each thread takes a run of the axis count_lines walks outermost, so it reads
 * memory of its own. The reduced axis outer (a row-major x counted per column): a run of its
 * lines into the thread's own row of `parts` (threads x kept, zeroed), added up after; the
 * kept axis outer (a row-major y counted per row): a run of k straight into `counts`. */
typedef struct {
    const char *base;
    int size;
    uint64_t mask;
    int64_t kept, kept_step, reduced, reduced_step;
    int64_t *counts, *parts;
    int rows; /* the rows of kept counts parts holds: no thread writes past them */
} LinesJob;

static int kept_inner(int64_t kept_step, int64_t reduced_step) {
    return (kept_step < 0 ? -kept_step : kept_step) <= (reduced_step < 0 ? -reduced_step : reduced_step);
}

static void lines_share(void *data, int index, int count) {
    const LinesJob *job = (const LinesJob *)data;
    if (count > job->rows) count = job->rows; /* cannot happen (a team is at most as asked): then */
    if (index >= count) return;               /* the first `rows` threads still cover every line */
    int split_reduced = kept_inner(job->kept_step, job->reduced_step);
    int64_t start, end;
    if (!native_share(split_reduced ? job->reduced : job->kept, index, count, 1, &start, &end)) return;
    if (split_reduced)
        count_lines(job->base + start * job->reduced_step, job->size, job->mask, job->kept, job->kept_step,
                    end - start, job->reduced_step, job->parts + index * job->kept);
    else
        count_lines(job->base + start * job->kept_step, job->size, job->mask, end - start, job->kept_step,
                    job->reduced, job->reduced_step, job->counts + start);
}

/* count_lines on `threads` threads where it is worth it (parts: threads x kept counts, or NULL). */
static void count_lines_shared(LinesJob *job, int threads) {
    if (threads <= 1 || job->parts == NULL) {
        count_lines(job->base, job->size, job->mask, job->kept, job->kept_step, job->reduced, job->reduced_step,
                    job->counts);
        return;
    }
    memset(job->parts, 0, (size_t)(threads * job->kept) * sizeof(int64_t));
    job->rows = threads;
    native_run_parallel(lines_share, job, threads);
    if (kept_inner(job->kept_step, job->reduced_step))
        for (int i = 0; i < threads; i++)
            for (int64_t k = 0; k < job->kept; k++) job->counts[k] += job->parts[i * job->kept + k];
}

typedef struct {
    uintptr_t address;
    int size;
    uint64_t mask;
    int64_t shape[3], strides[3]; /* bytes per step, already times the element size */
} Operand3;

static int parse_operand(PyObject *args, Py_ssize_t at, Operand3 *o) {
    unsigned long long address, mask;
    long long size;
    PyObject *shape, *strides, *operand = PyTuple_GET_ITEM(args, at);
    if (!PyTuple_Check(operand)) {
        PyErr_SetString(PyExc_TypeError, "an operand is a tuple (address, element_size, mask, shape, strides)");
        return -1;
    }
    if (!PyArg_ParseTuple(operand, "KLKOO", &address, &size, &mask, &shape, &strides)) return -1;
    if (!PyTuple_Check(shape) || !PyTuple_Check(strides) || PyTuple_GET_SIZE(shape) != 3 ||
        PyTuple_GET_SIZE(strides) != 3) {
        PyErr_SetString(PyExc_ValueError, "nonzero_pairs: shape and strides must be 3-tuples");
        return -1;
    }
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_ValueError, "nonzero_pairs: element size %lld", size);
        return -1;
    }
    o->address = (uintptr_t)address;
    o->size = (int)size;
    o->mask = mask;
    for (int d = 0; d < 3; d++) {
        o->shape[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        o->strides[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, d)) * size;
        if (o->shape[d] < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "nonzero_pairs: negative size");
            return -1;
        }
    }
    return PyErr_Occurred() ? -1 : 0;
}

/* nonzero_pairs((x_address, element_size, mask, (B, M, K), strides), (y_address, ..., (B, K, N),
 * strides)) -> int, or None where the count passes 2**64. Strides in elements; a broadcast
 * batch has stride 0. */
PyObject *native_nonzero_pairs(PyObject *Py_UNUSED(self), PyObject *args) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 2) {
        PyErr_SetString(PyExc_TypeError, "nonzero_pairs takes two operands");
        return NULL;
    }
    Operand3 x, y;
    if (parse_operand(args, 0, &x) < 0 || parse_operand(args, 1, &y) < 0) return NULL;
    int64_t batches = x.shape[0], rows = x.shape[1], inner = x.shape[2], columns = y.shape[2];
    if (y.shape[0] != batches || y.shape[1] != inner) {
        PyErr_SetString(PyExc_ValueError, "nonzero_pairs: x (B, M, K) and y (B, K, N) do not match");
        return NULL;
    }
    if ((batches * rows * inner > 0 && x.address == 0) || (batches * inner * columns > 0 && y.address == 0)) {
        PyErr_SetString(PyExc_ValueError, "nonzero_pairs: null address");
        return NULL;
    }
    int64_t *counts = PyMem_Calloc(inner > 0 ? 2 * inner : 1, sizeof(int64_t));
    if (counts == NULL) return PyErr_NoMemory();
    int64_t *of_x = counts, *of_y = counts + inner;
    /* a batch's operand shared among threads where it is large (one pass each otherwise) */
    int x_threads = native_scan_threads(rows * inner * x.size), y_threads = native_scan_threads(inner * columns * y.size);
    int threads = x_threads > y_threads ? x_threads : y_threads;
    int64_t *parts = threads > 1 ? PyMem_Calloc((size_t)(threads * inner) + 1, sizeof(int64_t)) : NULL;
    /* x (M, K): kept k (axis 2), reduced m; y (K, N): kept k (axis 1), reduced n */
    LinesJob x_lines = {NULL, x.size, x.mask, inner, x.strides[2], rows, x.strides[1], of_x, parts, 1};
    LinesJob y_lines = {NULL, y.size, y.mask, inner, y.strides[1], columns, y.strides[2], of_y, parts, 1};
    uint64_t total = 0; /* pairs: at most B*M*K*N; past 2**64 the caller counts in Python */
    int overflow = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t k = 0; k < inner; k++) of_x[k] = of_y[k] = 0;
        x_lines.base = (const char *)x.address + b * x.strides[0];
        y_lines.base = (const char *)y.address + b * y.strides[0];
        count_lines_shared(&x_lines, x_threads);
        count_lines_shared(&y_lines, y_threads);
        for (int64_t k = 0; k < inner; k++) {
            uint64_t pairs;
            overflow |= __builtin_mul_overflow((uint64_t)of_x[k], (uint64_t)of_y[k], &pairs);
            overflow |= __builtin_add_overflow(total, pairs, &total);
        }
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(counts);
    PyMem_Free(parts);
    if (overflow) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(total);
}

/* A share of nonzero_counts among the threads of torch's OpenMP runtime (scan/parallel.c):
 * thread `index` of `count` counts the slices a of its own run [a0, a1) into its own row of
 * `parts` (kept counts each), which the caller adds up: each thread reads memory of its own,
 * as the single pass does (cutting the positions instead would split every line between the
 * threads, which gains nothing over one thread). */
typedef struct {
    const Operand3 *x;
    int64_t *parts; /* rows x kept counts */
    int rows;
} CountsJob;

static void count_share(void *data, int index, int count) {
    const CountsJob *job = (const CountsJob *)data;
    if (count > job->rows) count = job->rows; /* as lines_share */
    if (index >= count) return;
    const Operand3 *x = job->x;
    int64_t kept = x->shape[2], a0, a1;
    if (!native_share(x->shape[0], index, count, 1, &a0, &a1)) return;
    int64_t *counts = job->parts + index * kept;
    for (int64_t a = a0; a < a1; a++)
        count_lines((const char *)x->address + a * x->strides[0], x->size, x->mask, kept, x->strides[2],
                    x->shape[1], x->strides[1], counts);
}

/* nonzero_counts((address, element_size, mask, (A, B, K), strides)) -> bytes: int64 counts, for
 * each k, of the nonzero x[a, b, k] over a and b: a convolution input's nonzeros per spatial
 * position over batch and channels (capture/ops/op_statistics.py _spatial_counts), one pass. */
PyObject *native_nonzero_counts(PyObject *Py_UNUSED(self), PyObject *args) {
    Operand3 x;
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 1) {
        PyErr_SetString(PyExc_TypeError, "nonzero_counts takes one operand");
        return NULL;
    }
    if (parse_operand(args, 0, &x) < 0) return NULL;
    int64_t outer = x.shape[0], reduced = x.shape[1], kept = x.shape[2];
    if (outer * reduced * kept > 0 && x.address == 0) {
        PyErr_SetString(PyExc_ValueError, "nonzero_counts: null address");
        return NULL;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, kept * (Py_ssize_t)sizeof(int64_t));
    if (result == NULL) return NULL;
    int64_t *counts = (int64_t *)PyBytes_AS_STRING(result);
    for (int64_t k = 0; k < kept; k++) counts[k] = 0;
    int threads = native_scan_threads(outer * reduced * kept * x.size);
    if (threads > outer) threads = outer > 1 ? (int)outer : 1;
    /* zeroed: the rows of threads a smaller team than asked never had add nothing */
    int64_t *parts = threads > 1 ? PyMem_Calloc((size_t)(threads * kept) + 1, sizeof(int64_t)) : NULL;
    if (threads > 1 && parts == NULL) threads = 1; /* no memory for the shares: one thread */
    CountsJob job = {&x, parts, threads};
    Py_BEGIN_ALLOW_THREADS
    if (threads > 1) {
        native_run_parallel(count_share, &job, threads);
        for (int i = 0; i < threads; i++)
            for (int64_t k = 0; k < kept; k++) counts[k] += parts[i * kept + k];
    } else {
        for (int64_t a = 0; a < outer; a++)
            count_lines((const char *)x.address + a * x.strides[0], x.size, x.mask, kept, x.strides[2], reduced,
                        x.strides[1], counts);
    }
    Py_END_ALLOW_THREADS
    PyMem_Free(parts);
    return result;
}
