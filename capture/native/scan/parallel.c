/* Large scans shared among the threads of the OpenMP runtime the process already runs.
 *
 * torch's CPU kernels run on an OpenMP team (libgomp in the Linux wheels). Between two ops its
 * workers spin, then sleep, waiting for the next parallel region; a value scan, run by the
 * capture on the calling thread alone, left the other cores idle while the step waited for it.
 * Here a scan of a large tensor is cut into one range per thread and run as a parallel region of
 * that same runtime, on its threads, so it uses what torch uses and no more: as many threads as
 * torch.set_num_threads() allows (omp_get_max_threads()), none of our own.
 *
 * No link-time dependency: the runtime is looked for when the module loads and, until found, at
 * each large scan (this module may load before torch), and only if the process has it loaded
 * already (dlopen with RTLD_NOLOAD), through the GOMP_parallel entry point that
 * GCC's libgomp, LLVM's libomp and Intel's libiomp5 all export. Where none is loaded, or on a
 * platform without dlopen, every scan runs on the calling thread. The counts do not
 * depend on how the memory is cut: each thread counts its own range into its own slot and the
 * caller adds the slots up.
 */
#define PY_SSIZE_T_CLEAN
#include "scan/scan.h"

#if defined(__unix__) || defined(__APPLE__)
#include <dlfcn.h>
#define HAVE_DLOPEN 1
#endif

/* Below this a scan stays on the calling thread. From it on, a scan is shared as torch shares
 * the elementwise op that most likely wrote the tensor: torch cuts an op's elements among its
 * threads from 32768 of them (at::internal::GRAIN_SIZE, 128 KB of float32), one equal run
 * each, as native_share cuts a scan, so each thread then reads the run it wrote from its own
 * core's cache, where the calling thread alone would read the runs other cores wrote from
 * theirs (benchmarks/shared_scans.py measures both). */
static int64_t parallel_from_bytes = 128 << 10;
static int thread_cap = MAX_SCAN_THREADS;

typedef void (*GompParallel)(void (*)(void *), void *, unsigned, unsigned);
static GompParallel gomp_parallel = NULL;
static int (*omp_thread_num)(void) = NULL;
static int (*omp_team_size)(void) = NULL;
static int (*omp_max_threads)(void) = NULL;

void native_parallel_init(void) {
#ifdef HAVE_DLOPEN
    if (gomp_parallel != NULL) return;
    static const char *runtimes[] = {"libgomp.so.1", "libomp.so", "libiomp5.so", "libomp.dylib", "libiomp5.dylib"};
    for (size_t i = 0; i < sizeof runtimes / sizeof runtimes[0]; i++) {
        void *handle = dlopen(runtimes[i], RTLD_NOW | RTLD_NOLOAD); /* only one already loaded */
        if (handle == NULL) continue;
        GompParallel parallel = (GompParallel)dlsym(handle, "GOMP_parallel");
        int (*number)(void) = (int (*)(void))dlsym(handle, "omp_get_thread_num");
        int (*size)(void) = (int (*)(void))dlsym(handle, "omp_get_num_threads");
        int (*most)(void) = (int (*)(void))dlsym(handle, "omp_get_max_threads");
        if (parallel != NULL && number != NULL && size != NULL && most != NULL) {
            gomp_parallel = parallel, omp_thread_num = number, omp_team_size = size, omp_max_threads = most;
            return; /* the handle stays open: the runtime stays loaded while we may call it */
        }
        dlclose(handle);
    }
#endif
}

int native_scan_threads(int64_t bytes) {
    if (bytes < parallel_from_bytes) return 1;
    if (gomp_parallel == NULL) native_parallel_init(); /* the module may have loaded before torch */
    if (gomp_parallel == NULL) return 1;
    int threads = omp_max_threads();
    if (threads > thread_cap) threads = thread_cap;
    return threads > 1 ? threads : 1;
}

typedef struct {
    ParallelBody body;
    void *data;
} Region;

static void region_entry(void *argument) {
    Region *region = (Region *)argument;
    region->body(region->data, omp_thread_num(), omp_team_size());
}

void native_run_parallel(ParallelBody body, void *data, int threads) {
    if (threads <= 1 || gomp_parallel == NULL) {
        body(data, 0, 1);
        return;
    }
    /* The team may be smaller than asked (a nested region runs on one thread): the body
     * cuts its work by the size the team has, never by `threads`. */
    Region region = {body, data};
    gomp_parallel(region_entry, &region, (unsigned)threads, 0);
}

int native_share(int64_t length, int index, int count, int64_t align, int64_t *start, int64_t *end) {
    int64_t share = ((length + count - 1) / count + align - 1) / align * align;
    *start = share * index;
    *end = *start + share < length ? *start + share : length;
    return *start < *end;
}

/* parallel_scan(min_bytes=None, max_threads=None) -> (runtime found, min_bytes, max_threads):
 * reads, and where given sets, when a scan is shared among threads (tests set a small size to
 * cut small tensors; max_threads 1 keeps every scan on the calling thread). */
PyObject *native_parallel_scan(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"min_bytes", "max_threads", NULL};
    PyObject *min_bytes = Py_None, *max_threads = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:parallel_scan", keywords, &min_bytes, &max_threads))
        return NULL;
    long long bytes = parallel_from_bytes, cap = thread_cap;
    if (min_bytes != Py_None && ((bytes = PyLong_AsLongLong(min_bytes)) == -1 && PyErr_Occurred())) return NULL;
    if (max_threads != Py_None && ((cap = PyLong_AsLongLong(max_threads)) == -1 && PyErr_Occurred())) return NULL;
    if (bytes < 0 || cap < 1 || cap > MAX_SCAN_THREADS) {
        PyErr_Format(PyExc_ValueError, "parallel_scan: min_bytes must be >= 0 and max_threads 1 to %d",
                     MAX_SCAN_THREADS);
        return NULL;
    }
    parallel_from_bytes = bytes, thread_cap = (int)cap;
    native_parallel_init();
    return Py_BuildValue("OLi", gomp_parallel != NULL ? Py_True : Py_False, (long long)parallel_from_bytes,
                         thread_cap);
}
