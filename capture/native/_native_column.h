/* spiketrace.capture.native._native.IntColumn (capture/native/_native_column.c), for the compiled record's appends. */
#ifndef SPIKETRACE_NATIVE_COLUMN_H
#define SPIKETRACE_NATIVE_COLUMN_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

extern PyTypeObject IntColumnType;
/* Whether `object` is an IntColumn. */
int int_column_check(PyObject *object);
/* Append v to the IntColumn `object`: 0, or -1 with OverflowError or MemoryError set. */
int int_column_append(PyObject *object, long long v);
int native_add_column_type(PyObject *module);

#endif
