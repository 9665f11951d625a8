/* What capture/_native.c shares with the compiled passes in the other files. */
#ifndef SPIKETRACE_NATIVE_H
#define SPIKETRACE_NATIVE_H
#include <Python.h>
#include <stdint.h>

#define MAX_DIMS 64

/* A sequence of at most MAX_DIMS ints into out[], its length into *count; -1 with an error
 * naming `what` (a shape or strides argument) otherwise. */
int read_int64s(PyObject *sequence, int64_t *out, Py_ssize_t *count, const char *what);

#endif
