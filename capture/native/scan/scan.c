/* The one-pass value scan of a CPU tensor's memory (the module's `scan`, and the compiled
 * record's scan of a new state).
 *
 * scan(address, element_size, zero_mask, one_bits, count_ones, shape, strides) -> (nnz, ones)
 *   Counts, in one pass over a CPU tensor's memory, the elements that are not zero and the
 *   elements equal to one, comparing bit patterns: an element is zero when
 *   (bits & zero_mask) == 0 (floats mask the sign bit out, so -0.0 is zero; NaN and the
 *   infinities have exponent bits set, so they are not) and one when bits == one_bits (the
 *   format's 1: 0x3f800000 for float32, 1 for integers and bool). That is exactly what
 *   `x != 0` and `x == 1` say for every value, NaN included, without a float compare.
 *   `strides` are in elements, any sign or zero (expanded views count each logical element).
 *   When the first element is neither 0 nor 1 only the non-zeros are counted and `ones` is
 *   -1 (the tensor is not 0/1 whatever the rest holds). The GIL is released while a large
 *   tensor is scanned, and a large scan is shared among torch's OpenMP threads (scan/parallel.c).
 */
#include "scan/scan.h"
#define RELEASE_GIL_FROM 65536 /* elements: below this the GIL round trip costs more than it frees */

typedef struct {
    int64_t nnz;
    int64_t ones;
} Counts;

/* One contiguous-or-strided inner row of n elements, for each element width. The counts of a
 * block are kept in integers as wide as the elements (the block is short enough that they
 * cannot wrap), so the compiler vectorises the contiguous loop: one compare per lane. */
#define DEFINE_ROW(NAME, TYPE, BLOCK)                                                        \
    VECTOR_CLONES static void NAME(const char *base, int64_t n, int64_t stride, uint64_t zero_mask,         \
                     uint64_t one_bits, Counts *c) {                                          \
        const TYPE *p = (const TYPE *)base;                                                   \
        const TYPE mask = (TYPE)zero_mask, one = (TYPE)one_bits;                              \
        int64_t zeros = 0, ones = 0;                                                          \
        for (int64_t start = 0; start < n; start += (BLOCK)) {                               \
            int64_t end = start + (BLOCK) < n ? start + (BLOCK) : n;                           \
            TYPE block_zeros = 0, block_ones = 0;                                             \
            if (stride == 1) {                                                                \
                SCAN_UNROLL for (int64_t i = start; i < end; i++) {                                       \
                    TYPE v = p[i];                                                            \
                    block_zeros += (TYPE)((v & mask) == 0);                                   \
                    block_ones += (TYPE)(v == one);                                           \
                }                                                                             \
            } else {                                                                          \
                for (int64_t i = start; i < end; i++) {                                       \
                    TYPE v = p[i * stride];                                                   \
                    block_zeros += (TYPE)((v & mask) == 0);                                   \
                    block_ones += (TYPE)(v == one);                                           \
                }                                                                             \
            }                                                                                 \
            zeros += block_zeros;                                                             \
            ones += block_ones;                                                               \
        }                                                                                     \
        c->nnz += n - zeros;                                                                  \
        c->ones += ones;                                                                      \
    }

DEFINE_ROW(row8, uint8_t, 255)
DEFINE_ROW(row16, uint16_t, 65535)
DEFINE_ROW(row32, uint32_t, 1 << 30)
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* 64-bit elements as two 32-bit halves (low word first): baseline x86-64 has no 64-bit
 * vector compare, 32-bit lanes it has. Zero: no masked bit set in either half; one: both
 * halves equal the pattern's. */
VECTOR_CLONES static void row64(const char *base, int64_t n, int64_t stride, uint64_t zero_mask, uint64_t one_bits, Counts *c) {
    const uint32_t *p = (const uint32_t *)base;
    const uint32_t mask_low = (uint32_t)zero_mask, mask_high = (uint32_t)(zero_mask >> 32);
    const uint32_t one_low = (uint32_t)one_bits, one_high = (uint32_t)(one_bits >> 32);
    int64_t zeros = 0, ones = 0;
    const int64_t step = 2 * stride;
    for (int64_t start = 0; start < n; start += (int64_t)1 << 30) {
        int64_t end = start + ((int64_t)1 << 30) < n ? start + ((int64_t)1 << 30) : n;
        uint32_t block_zeros = 0, block_ones = 0;
        if (stride == 1) {
            for (int64_t i = start; i < end; i++) {
                uint32_t low = p[2 * i], high = p[2 * i + 1];
                block_zeros += (uint32_t)(((low & mask_low) | (high & mask_high)) == 0);
                block_ones += (uint32_t)((low == one_low) & (high == one_high));
            }
        } else {
            for (int64_t i = start; i < end; i++) {
                uint32_t low = p[i * step], high = p[i * step + 1];
                block_zeros += (uint32_t)(((low & mask_low) | (high & mask_high)) == 0);
                block_ones += (uint32_t)((low == one_low) & (high == one_high));
            }
        }
        zeros += block_zeros;
        ones += block_ones;
    }
    c->nnz += n - zeros;
    c->ones += ones;
}
#else
DEFINE_ROW(row64, uint64_t, (int64_t)1 << 40)
#endif

/* The same rows counting only non-zero elements: for a tensor whose first element is neither
 * 0 nor 1 (so it is not 0/1 whatever follows), one compare per element instead of two. */
#define DEFINE_NONZERO_ROW(NAME, TYPE, BLOCK)                                                \
    VECTOR_CLONES static void NAME(const char *base, int64_t n, int64_t stride, uint64_t zero_mask,         \
                     uint64_t one_bits, Counts *c) {                                          \
        const TYPE *p = (const TYPE *)base;                                                   \
        const TYPE mask = (TYPE)zero_mask;                                                    \
        (void)one_bits;                                                                       \
        int64_t zeros = 0;                                                                    \
        for (int64_t start = 0; start < n; start += (BLOCK)) {                               \
            int64_t end = start + (BLOCK) < n ? start + (BLOCK) : n;                           \
            TYPE block_zeros = 0;                                                             \
            if (stride == 1) {                                                                \
                SCAN_UNROLL for (int64_t i = start; i < end; i++) block_zeros += (TYPE)((p[i] & mask) == 0);  \
            } else {                                                                          \
                for (int64_t i = start; i < end; i++) block_zeros += (TYPE)((p[i * stride] & mask) == 0); \
            }                                                                                 \
            zeros += block_zeros;                                                             \
        }                                                                                     \
        c->nnz += n - zeros;                                                                  \
    }

DEFINE_NONZERO_ROW(nonzero8, uint8_t, 255)
DEFINE_NONZERO_ROW(nonzero16, uint16_t, 65535)
DEFINE_NONZERO_ROW(nonzero32, uint32_t, 1 << 30)
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
VECTOR_CLONES static void nonzero64(const char *base, int64_t n, int64_t stride, uint64_t zero_mask, uint64_t one_bits, Counts *c) {
    const uint32_t *p = (const uint32_t *)base; /* 32-bit halves, as row64 */
    const uint32_t mask_low = (uint32_t)zero_mask, mask_high = (uint32_t)(zero_mask >> 32);
    const int64_t step = 2 * stride;
    (void)one_bits;
    int64_t zeros = 0;
    for (int64_t start = 0; start < n; start += (int64_t)1 << 30) {
        int64_t end = start + ((int64_t)1 << 30) < n ? start + ((int64_t)1 << 30) : n;
        uint32_t block_zeros = 0;
        for (int64_t i = start; i < end; i++)
            block_zeros += (uint32_t)(((p[i * step] & mask_low) | (p[i * step + 1] & mask_high)) == 0);
        zeros += block_zeros;
    }
    c->nnz += n - zeros;
}
#else
DEFINE_NONZERO_ROW(nonzero64, uint64_t, (int64_t)1 << 40)
#endif

typedef void (*RowFunction)(const char *, int64_t, int64_t, uint64_t, uint64_t, Counts *);

/* A scan's memory as rows: dimensions sorted by |stride| with the largest outermost (the
 * counts do not depend on the order; a transposed view then reads rows, not columns), size-1
 * dimensions dropped, stride-0 (expanded) ones counted once and the count multiplied by how
 * often they repeat, and dimensions contiguous with the next merged into longer rows. */
typedef struct {
    const char *base;
    int dims; /* merged dimensions, the last one the row; 0 when every element is one element */
    int64_t shape[MAX_DIMS], strides[MAX_DIMS];
    int64_t element_size, repeats, total; /* total: the distinct elements visited */
    RowFunction row;
    uint64_t zero_mask, one_bits;
    Counts parts[MAX_SCAN_THREADS]; /* one per thread of a shared scan */
} ScanPlan;

static void plan_scan(ScanPlan *plan, const char *base, int ndim, const int64_t *shape, const int64_t *strides) {
    int64_t sorted_shape[MAX_DIMS], sorted_strides[MAX_DIMS];
    int kept = 0;
    plan->base = base;
    plan->repeats = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;
        if (strides[d] == 0) {
            plan->repeats *= shape[d];
            continue;
        }
        int64_t size = shape[d], stride = strides[d], magnitude = stride < 0 ? -stride : stride;
        int at = kept++;
        while (at > 0) {
            int64_t before = sorted_strides[at - 1] < 0 ? -sorted_strides[at - 1] : sorted_strides[at - 1];
            if (before >= magnitude) break;
            sorted_shape[at] = sorted_shape[at - 1];
            sorted_strides[at] = sorted_strides[at - 1];
            at--;
        }
        sorted_shape[at] = size;
        sorted_strides[at] = stride;
    }
    plan->dims = 0;
    plan->total = 1;
    if (kept == 0) return;
    int m = 0;
    plan->shape[0] = sorted_shape[0];
    plan->strides[0] = sorted_strides[0];
    for (int d = 1; d < kept; d++) {
        if (plan->strides[m] == sorted_strides[d] * sorted_shape[d]) {
            plan->shape[m] *= sorted_shape[d];
            plan->strides[m] = sorted_strides[d];
        } else {
            m++;
            plan->shape[m] = sorted_shape[d];
            plan->strides[m] = sorted_strides[d];
        }
    }
    plan->dims = m + 1;
    for (int d = 0; d < plan->dims; d++) plan->total *= plan->shape[d];
}

/* Elements [begin, end) of the plan in its row-major order, counted into *counts. */
static void scan_range(const ScanPlan *plan, int64_t begin, int64_t end, Counts *counts) {
    if (plan->dims == 0) {
        if (begin < end) plan->row(plan->base, 1, 1, plan->zero_mask, plan->one_bits, counts);
        return;
    }
    const int outer = plan->dims - 1;
    const int64_t inner = plan->shape[outer], inner_stride = plan->strides[outer], size = plan->element_size;
    int64_t index[MAX_DIMS], row = begin / inner, offset = begin % inner, left = end - begin;
    for (int d = outer - 1; d >= 0; d--) {
        index[d] = row % plan->shape[d];
        row /= plan->shape[d];
    }
    while (left > 0) {
        const char *p = plan->base;
        for (int d = 0; d < outer; d++) p += index[d] * plan->strides[d] * size;
        int64_t n = inner - offset < left ? inner - offset : left;
        plan->row(p + offset * inner_stride * size, n, inner_stride, plan->zero_mask, plan->one_bits, counts);
        left -= n;
        offset = 0;
        for (int d = outer - 1; d >= 0; d--) {
            if (++index[d] < plan->shape[d]) break;
            index[d] = 0;
        }
    }
}

/* One thread's share of a shared scan: an equal run of elements (a multiple of 64, so the
 * vector loops see whole vectors but at the very end), counted into its own slot. */
static void scan_share(void *data, int index, int count) {
    ScanPlan *plan = (ScanPlan *)data;
    /* No team exceeds the threads asked (at most MAX_SCAN_THREADS); were one larger, its first
     * MAX_SCAN_THREADS threads would still cover every element between them. */
    if (count > MAX_SCAN_THREADS) count = MAX_SCAN_THREADS;
    if (index >= count) return;
    int64_t begin, end;
    Counts mine = {0, 0};
    if (native_share(plan->total, index, count, 64, &begin, &end)) scan_range(plan, begin, end, &mine);
    plan->parts[index] = mine;
}

static void scan_strided(ScanPlan *plan, int threads, Counts *counts) {
    Counts once = {0, 0};
    if (threads > 1 && plan->total >= 64 * (int64_t)threads) {
        memset(plan->parts, 0, sizeof plan->parts);
        native_run_parallel(scan_share, plan, threads);
        for (int i = 0; i < threads && i < MAX_SCAN_THREADS; i++) {
            once.nnz += plan->parts[i].nnz;
            once.ones += plan->parts[i].ones;
        }
    } else {
        scan_range(plan, 0, plan->total, &once);
    }
    counts->nnz += once.nnz * plan->repeats;
    counts->ones += once.ones * plan->repeats;
}

/* native.h: the counts of one tensor's memory, for the compiled record (record/forms.c, which
 * checked its arguments). */
int native_scan_counts(uintptr_t address, int64_t element_size, uint64_t zero_mask, uint64_t one_bits,
                       int count_ones, int ndim, const int64_t *shape, const int64_t *strides, int64_t *nnz,
                       int64_t *ones) {
    RowFunction row, nonzero_row;
    uint64_t first = 0;
    const char *base = (const char *)address;
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) numel *= shape[d];
    switch (element_size) { /* element 0 lies at the address whatever the strides */
        case 1: row = row8, nonzero_row = nonzero8; if (numel) first = *(const uint8_t *)base; break;
        case 2: row = row16, nonzero_row = nonzero16; if (numel) first = *(const uint16_t *)base; break;
        case 4: row = row32, nonzero_row = nonzero32; if (numel) first = *(const uint32_t *)base; break;
        case 8: row = row64, nonzero_row = nonzero64; if (numel) first = *(const uint64_t *)base; break;
        default:
            PyErr_Format(PyExc_ValueError, "scan: element size %lld is not 1, 2, 4 or 8", (long long)element_size);
            return -1;
    }
    /* A first element neither 0 nor 1 decides is01 (False): only the non-zeros are counted,
     * and `ones` is -1, which no count of non-zeros equals. So it is when the caller asks for
     * the non-zeros only (`count_ones` 0: a bool tensor, 0/1 by its type). */
    int binary_possible = count_ones && (numel == 0 || (first & zero_mask) == 0 || first == one_bits);
    RowFunction chosen = binary_possible ? row : nonzero_row;
    Counts counts = {0, 0};
    if (numel > 0) {
        ScanPlan plan;
        plan.element_size = element_size, plan.row = chosen, plan.zero_mask = zero_mask, plan.one_bits = one_bits;
        plan_scan(&plan, base, ndim, shape, strides);
        int threads = native_scan_threads(plan.total * element_size); /* the memory it reads */
        if (numel >= RELEASE_GIL_FROM) {
            Py_BEGIN_ALLOW_THREADS
            scan_strided(&plan, threads, &counts);
            Py_END_ALLOW_THREADS
        } else {
            scan_strided(&plan, threads, &counts);
        }
    }
    *nnz = counts.nnz;
    *ones = binary_possible ? counts.ones : -1;
    return 0;
}

PyObject *native_scan(PyObject *self, PyObject *args) {
    unsigned long long address, zero_mask, one_bits;
    long long element_size;
    int count_ones;
    PyObject *shape_object, *strides_object;
    if (!PyArg_ParseTuple(args, "KLKKpOO:scan", &address, &element_size, &zero_mask, &one_bits, &count_ones,
                          &shape_object, &strides_object))
        return NULL;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS], numel;
    Py_ssize_t ndim;
    if (read_layout("scan", shape_object, strides_object, shape, strides, &ndim, &numel) < 0) return NULL;
    if (numel > 0 && address == 0) {
        PyErr_SetString(PyExc_ValueError, "scan: null address");
        return NULL;
    }
    int64_t nnz, ones;
    if (native_scan_counts((uintptr_t)address, element_size, zero_mask, one_bits, count_ones, (int)ndim, shape,
                           strides, &nnz, &ones) < 0)
        return NULL;
    return Py_BuildValue("LL", (long long)nnz, (long long)ones);
}
