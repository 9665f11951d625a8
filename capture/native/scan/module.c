/* spiketrace.capture.native._native: the module, its functions, and the table of the types the
 * parts define (native.h says which part does what); the module calls its parts, never the
 * other way round.
 *
 * Optional (pyproject.toml): where it cannot build, capture/native/__init__.py says so and the
 * Python paths run instead, recording the same trace. */
#include "native.h"

/* Every type of the module, under its Python name, in the order they are added. */
static const struct {
    PyTypeObject *type;
    const char *name;
} TYPES[] = {
    {&OpRecorderType, "OpRecorder"},
    {&IntColumnType, "IntColumn"},
    {&DispatchHandlerType, "DispatchHandler"},
    {&CounterType, "Counter"},
};

/* Each type readied and added to the module: 0, or -1 with an exception set. */
static int add_types(PyObject *module) {
    for (size_t i = 0; i < sizeof(TYPES) / sizeof(TYPES[0]); i++) {
        if (PyType_Ready(TYPES[i].type) < 0) return -1;
        Py_INCREF(TYPES[i].type);
        if (PyModule_AddObject(module, TYPES[i].name, (PyObject *)TYPES[i].type) < 0) {
            Py_DECREF(TYPES[i].type);
            return -1;
        }
    }
    return 0;
}

static PyMethodDef methods[] = {
    {"scan", native_scan, METH_VARARGS,
     "scan(address, element_size, zero_mask, one_bits, count_ones, shape, strides) -> (nnz, ones): one pass over "
     "a CPU tensor's memory counting non-zero elements and elements equal to one, by bit pattern "
     "(ones -1: the first element is neither 0 nor 1)."},
    {"nonzero_pairs", native_nonzero_pairs, METH_VARARGS,
     "nonzero_pairs(x, y) -> int | None (past 2**64): sum over b, k of nnz(x[b, :, k]) * nnz(y[b, k, :]); each operand (address, "
     "element_size, nonzero_mask, (B, M, K) or (B, K, N), strides in elements)."},
    {"nonzero_counts", native_nonzero_counts, METH_VARARGS,
     "nonzero_counts((address, element_size, nonzero_mask, (A, B, K), strides)) -> bytes: int64 count of the "
     "nonzero x[a, b, k] over a and b, for each k."},
    {"ternary", native_ternary, METH_VARARGS,
     "ternary(address, element_size, nonzero_mask, one_bits, minus_one_allowed, shape, strides) -> bool: every "
     "element 0, 1 or -1."},
    {"parallel_scan", (PyCFunction)(void (*)(void))native_parallel_scan, METH_VARARGS | METH_KEYWORDS,
     "parallel_scan(min_bytes=None, max_threads=None) -> (runtime found, min_bytes, max_threads): when a scan is "
     "shared among the threads of the OpenMP runtime torch loaded (read, and set where given)."},
    {"tensor_attributes", native_tensor_attributes, METH_O,
     "tensor_attributes(t) -> (_version, shape, requires_grad, dtype, device, is_cpu, layout, is_meta) as the "
     "compiled record reads them: through torch's getters, found once per type."},
    {"identity_codes", native_identity_codes, METH_O,
     "identity_codes(rows: list) -> (codes: bytes of int32, distinct: list): each row's index among the distinct "
     "objects of rows, by identity, in first-seen order."},
    {"propagate", (PyCFunction)(void (*)(void))native_propagate, METH_FASTCALL,
     "propagate(propagation, args, kwargs, out, known) -> (nnz, is01) | None | 'python': the output statistics "
     "the compiled record's rule `propagation` (a PROPAGATE_* constant) derives for `out` from `known` "
     "(id(tensor) -> its (nnz, is01) or None, for each tensor among args); None: none, the output is scanned; "
     "'python': the Python rule decides (for a large output)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "spiketrace.capture.native._native",
                                    "Compiled inner loops of capture's per-op path.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    native_parallel_init();
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && (native_add_interface(m) < 0 || add_types(m) < 0)) Py_CLEAR(m);
    return m;
}
