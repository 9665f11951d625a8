/* spiketrace.capture.native._native.Counter: a number the record takes and advances, readable from Python.
 *
 * The trace's counters (the context's seq, the registry's next tensor id and uid) are held
 * here, so the compiled record takes one with an increment (counter_take) instead of reading
 * an int attribute, making the next int and setting it back, three times an op; Python reads
 * and sets `value` as it would the attribute (capture/native/counters.py has the pure-Python
 * counter used where the extension is not built, which counter_take takes through its
 * methods). */
#include "record/record.h"

typedef struct {
    PyObject_HEAD
    long long value;
} Counter;


long long counter_take(PyObject *counter) {
    if (Py_IS_TYPE(counter, &CounterType)) return ((Counter *)counter)->value++;
    PyObject *taken = PyObject_CallMethodNoArgs(counter, s_take); /* a Python counter */
    if (taken == NULL) return -1;
    long long value = PyLong_AsLongLong(taken);
    Py_DECREF(taken);
    return value;
}

PyObject *counter_value(PyObject *counter) {
    if (Py_IS_TYPE(counter, &CounterType)) return PyLong_FromLongLong(((Counter *)counter)->value);
    return PyObject_GetAttr(counter, s_value);
}

static int Counter_init(Counter *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"value", NULL};
    self->value = 0;
    return PyArg_ParseTupleAndKeywords(args, kwargs, "|L", names, &self->value) ? 0 : -1;
}

static PyObject *Counter_take(Counter *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(self->value++);
}

static PyObject *Counter_repr(Counter *self) {
    return PyUnicode_FromFormat("Counter(%lld)", self->value);
}

static PyMemberDef Counter_members[] = {
    {"value", T_LONGLONG, offsetof(Counter, value), 0, "the number take() gives next"},
    {NULL},
};

static PyMethodDef Counter_methods[] = {
    {"take", (PyCFunction)Counter_take, METH_NOARGS, "take() -> value, which is then one more"},
    {NULL},
};

PyTypeObject CounterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spiketrace.capture.native._native.Counter",
    .tp_basicsize = sizeof(Counter),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Counter_init,
    .tp_repr = (reprfunc)Counter_repr,
    .tp_members = Counter_members,
    .tp_methods = Counter_methods,
    .tp_doc = "Counter(value=0): a counter the compiled record advances without a Python int per step",
};
