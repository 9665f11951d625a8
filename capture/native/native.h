/* spiketrace.capture.native._native: what its two halves give each other and the module.
 *
 * scan/ holds the module (scan/module.c) and its value kernels: the one-pass scan, the
 * nonzero-pair and ternary passes, the shared-thread runtime, IntColumn and identity_codes.
 * record/ holds the compiled per-op record (OpRecorder, DispatchHandler, Counter) and the
 * interface it shares with the Python it mirrors (record/interface.h). Plain CPython API, no
 * torch headers: it builds with the Python headers and a C compiler at install time.
 */
#ifndef SPIKETRACE_NATIVE_H
#define SPIKETRACE_NATIVE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* The most dimensions a tensor the kernels read may have. */
#define MAX_DIMS 64

/* scan/scan.c: the counts of one tensor's memory (nnz, and the ones where count_ones and the
 * first element is 0 or 1, else -1), its arguments checked by the caller: 0, or -1 with an
 * exception set. */
int native_scan_counts(uintptr_t address, int64_t element_size, uint64_t zero_mask, uint64_t one_bits,
                       int count_ones, int ndim, const int64_t *shape, const int64_t *strides, int64_t *nnz,
                       int64_t *ones);

/* scan/column.c: whether `object` is an IntColumn; append v to one (0, or -1 with OverflowError
 * or MemoryError set). */
int int_column_check(PyObject *object);
int int_column_append(PyObject *object, long long v);

/* The types the parts define. scan/module.c's table readies them and adds them to the module:
 * the module calls into its parts, no part calls back into the module. */
extern PyTypeObject IntColumnType;        /* scan/column.c */
extern PyTypeObject CounterType;          /* record/counter.c */
extern PyTypeObject OpRecorderType;       /* record/recorder.c */
extern PyTypeObject DispatchHandlerType;  /* record/dispatch.c */

/* record/interface.c: its constants added to the module (it interns the names first): 0, or
 * -1 with an exception set. */
int native_add_interface(PyObject *module);

/* The module's functions, each documented in scan/module.c's method table. */
PyObject *native_scan(PyObject *self, PyObject *args);                               /* scan/scan.c */
PyObject *native_nonzero_pairs(PyObject *self, PyObject *args);                      /* scan/pairs.c */
PyObject *native_nonzero_counts(PyObject *self, PyObject *args);                     /* scan/pairs.c */
PyObject *native_ternary(PyObject *self, PyObject *args);                            /* scan/ternary.c */
PyObject *native_parallel_scan(PyObject *self, PyObject *args, PyObject *kwargs);    /* scan/parallel.c */
PyObject *native_identity_codes(PyObject *self, PyObject *rows);                     /* scan/codes.c */
PyObject *native_tensor_attributes(PyObject *self, PyObject *t);                     /* record/attrs.c */
PyObject *native_propagate(PyObject *self, PyObject *const *argv, Py_ssize_t argc);  /* record/inherit.c */

/* scan/parallel.c: looks for torch's OpenMP runtime (when the module loads, and until found). */
void native_parallel_init(void);

#endif
