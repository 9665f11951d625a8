/* The shape and strides a kernel's caller passes (scan/scan.h read_layout), read into C arrays. */
#include "scan/scan.h"

int read_int64s(PyObject *sequence, int64_t *out, Py_ssize_t *count, const char *what) {
    PyObject *fast = PySequence_Fast(sequence, what);
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions, at most %d", what, n, MAX_DIMS);
        return -1;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t i = 0; i < n; i++) {
        long long v = PyLong_AsLongLong(items[i]);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(fast);
            return -1;
        }
        out[i] = (int64_t)v;
    }
    *count = n;
    Py_DECREF(fast);
    return 0;
}

int read_layout(const char *op, PyObject *shape_object, PyObject *strides_object, int64_t *shape, int64_t *strides,
                Py_ssize_t *ndim, int64_t *numel) {
    char what[64];
    Py_ssize_t nstrides;
    snprintf(what, sizeof(what), "%s: shape", op);
    if (read_int64s(shape_object, shape, ndim, what) < 0) return -1;
    snprintf(what, sizeof(what), "%s: strides", op);
    if (read_int64s(strides_object, strides, &nstrides, what) < 0) return -1;
    if (*ndim != nstrides) {
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions but %zd strides", op, *ndim, nstrides);
        return -1;
    }
    *numel = 1;
    for (Py_ssize_t d = 0; d < *ndim; d++) {
        if (shape[d] < 0) {
            PyErr_Format(PyExc_ValueError, "%s: negative size", op);
            return -1;
        }
        *numel *= shape[d];
    }
    return 0;
}
