/* What the value kernels of scan/ share: the vector builds, the layout of a pass's arguments
 * and the threads of torch's OpenMP runtime. */
#ifndef SPIKETRACE_SCAN_H
#define SPIKETRACE_SCAN_H
#include "native.h"

/* The scan loops are built twice where the toolchain can choose between the builds when the
 * module loads (GCC or clang function multiversioning, through glibc's ifunc): AVX2 (8 lanes a
 * compare) and the x86-64 baseline (SSE2: 4), so one build runs on every x86-64 CPU and uses
 * AVX2 where it has it (benchmarks/capture_overhead.py measures the scans). */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef VECTOR_CLONES
#define VECTOR_CLONES
#endif
/* Four vector iterations a loop turn: independent accumulators, so the counting loop is not
 * bound by one add's latency. */
#if defined(__GNUC__)
#define SCAN_UNROLL _Pragma("GCC unroll 4")
#else
#define SCAN_UNROLL
#endif

/* scan/layout.c: a sequence of at most MAX_DIMS ints into out[], its length into *count; -1
 * with an error naming `what` (a shape or strides argument) otherwise. */
int read_int64s(PyObject *sequence, int64_t *out, Py_ssize_t *count, const char *what);

/* scan/layout.c: a pass's shape and strides (in elements) into shape[] and strides[], their
 * length into *ndim and the element count into *numel: 0, or -1 with a ValueError naming `op`
 * (too many dimensions, as many strides as dimensions, a negative size). */
int read_layout(const char *op, PyObject *shape_object, PyObject *strides_object, int64_t *shape, int64_t *strides,
                Py_ssize_t *ndim, int64_t *numel);

/* Large scans shared among the threads of the OpenMP runtime torch runs (scan/parallel.c).
 * native_parallel_init() (native.h) looks for it; native_scan_threads(bytes) is how many
 * threads a scan of that many bytes gets (1: the calling thread alone); native_run_parallel()
 * calls body(data, index, count) once on each of `count` threads (the team torch's runtime
 * gives, which may be smaller than asked) and returns when all are done. */
#define MAX_SCAN_THREADS 64
typedef void (*ParallelBody)(void *data, int index, int count);
int native_scan_threads(int64_t bytes);
void native_run_parallel(ParallelBody body, void *data, int threads);
/* The run [*start, *end) of `length` items that share `index` of `count` takes: equal runs, each
 * a multiple of `align` items (whole vectors) but the last; 0 when it takes none. */
int native_share(int64_t length, int index, int count, int64_t align, int64_t *start, int64_t *end);

#endif
