/* A plain tensor's attributes through torch's getters (record/attrs.c): the object
 * PyObject_GetAttr(t, name) gives, a new reference, or NULL with an exception set. */
#ifndef SPIKETRACE_RECORD_ATTRS_H
#define SPIKETRACE_RECORD_ATTRS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef enum {
    TENSOR_VERSION, /* _version */
    TENSOR_SHAPE,
    TENSOR_REQUIRES_GRAD,
    TENSOR_DTYPE,
    TENSOR_DEVICE,
    TENSOR_IS_CPU,
    TENSOR_LAYOUT,
    TENSOR_IS_META,
    TENSOR_ATTRIBUTES
} TensorAttribute;

PyObject *tensor_attribute(PyObject *t, TensorAttribute which);

#endif
