/* The parts of an event the compiled record writes (record/record.c): the appends into the
 * buffers, the interning keys of its positional and keyword arguments (capture/ops/arguments.py
 * encode_call's) and the JSON of a tuple or list out. Its context tuples are record/context.c's. */
#include "record/record.h"

/* The IntColumn whose bound append `append` is (borrowed), else NULL. */
static PyObject *int_column_of(PyObject *append) {
    return PyCFunction_Check(append) && int_column_check(PyCFunction_GET_SELF(append)) ? PyCFunction_GET_SELF(append)
                                                                                      : NULL;
}

int call_append(PyObject *appends, Py_ssize_t i, PyObject *value) {
    PyObject *append = PyTuple_GET_ITEM(appends, i), *column = int_column_of(append);
    if (column != NULL) { /* an IntColumn's own append: stored directly */
        long long v = PyLong_AsLongLong(value);
        return v == -1 && PyErr_Occurred() ? -1 : int_column_append(column, v);
    }
    /* A list's or an array's own append (a METH_O builtin) is called directly: most of a
     * call through the generic machinery is the machinery. */
    PyObject *r = PyCFunction_Check(append) && PyCFunction_GET_FLAGS(append) == METH_O
                      ? PyCFunction_GET_FUNCTION(append)(PyCFunction_GET_SELF(append), value)
                      : PyObject_CallOneArg(append, value);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

PyObject *stats_tuple(long long nnz, PyObject *is01) {
    PyObject *count = PyLong_FromLongLong(nnz);
    if (count == NULL) return NULL;
    PyObject *pair = PyTuple_New(2); /* not Py_BuildValue: its format parsing cost more than the tuple */
    if (pair == NULL) {
        Py_DECREF(count);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, count);
    PyTuple_SET_ITEM(pair, 1, Py_NewRef(is01));
    return pair;
}

int append_long(PyObject *appends, Py_ssize_t i, long long value) {
    PyObject *column = int_column_of(PyTuple_GET_ITEM(appends, i));
    if (column != NULL) return int_column_append(column, value); /* no Python int made */
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int r = call_append(appends, i, v);
    Py_DECREF(v);
    return r;
}

/* null is NULL_SENTINEL in the nnz and is01 columns (capture/store/table_buffer.py NULL_SENTINELS) */
int append_or_null(PyObject *appends, Py_ssize_t i, PyObject *value) {
    return value == Py_None ? append_long(appends, i, NULL_SENTINEL) : call_append(appends, i, value);
}

/* A tuple of values[0..n) (new references to them), NULL with an exception set: the record's
 * tuples are filled by their enums' members (record/interface.h), so an order is written once. */
PyObject *pack_fields(PyObject *const *values, Py_ssize_t n) {
    PyObject *tuple = PyTuple_New(n);
    for (Py_ssize_t i = 0; tuple != NULL && i < n; i++) PyTuple_SET_ITEM(tuple, i, Py_NewRef(values[i]));
    return tuple;
}

/* The interning key of one positional argument, a new reference; NULL with no error set
 * when the argument is of a kind this path leaves to Python. */
PyObject *argument_key(OpRecorder *self, PyObject *a) {
    if (a == Py_None || PyLong_CheckExact(a)) return Py_NewRef(a);
    if (PyFloat_CheckExact(a)) {
        double v = PyFloat_AS_DOUBLE(a);
        if (!isfinite(v)) return NULL;
        return Py_BuildValue("(OOd)", self->float_marker, a, copysign(1.0, v));
    }
    if (PyBool_Check(a)) return PyTuple_Pack(2, self->bool_marker, a); /* True is not 1 here */
    if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
        PyObject **items = PySequence_Fast_ITEMS(a);
        if (n > 0 && PyBool_Check(items[0])) { /* a list of bools (output_mask): (bool marker, the bools) */
            for (Py_ssize_t i = 1; i < n; i++)
                if (!PyBool_Check(items[i])) return NULL;
            PyObject *bools = PySequence_Tuple(a);
            if (bools == NULL) return NULL;
            PyObject *key = PyTuple_Pack(2, self->bool_marker, bools);
            Py_DECREF(bools);
            return key;
        }
        PyObject *key = PyTuple_New(n + 1);
        if (key == NULL) return NULL;
        PyTuple_SET_ITEM(key, 0, Py_NewRef(self->ints_marker));
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!PyLong_CheckExact(items[i])) {
                Py_DECREF(key);
                return NULL;
            }
            PyTuple_SET_ITEM(key, i + 1, Py_NewRef(items[i]));
        }
        return key;
    }
    return NULL;
}

/* The interning key of an op's keyword arguments, a new tuple (name, value key, ...): a value
 * is keyed with its type (True never meets 1), a float as argument_key keys it. NULL with no
 * error set where a value is of a kind this path leaves to Python (a tensor, a list, inf). */
static PyObject *kwargs_key(OpRecorder *self, PyObject *kwargs) {
    Py_ssize_t position = 0, i = 0;
    PyObject *name, *value;
    PyObject *key = PyTuple_New(2 * PyDict_GET_SIZE(kwargs));
    if (key == NULL) return NULL;
    while (PyDict_Next(kwargs, &position, &name, &value)) {
        PyTypeObject *type = Py_TYPE(value);
        int plain = value == Py_None || type == &PyBool_Type || type == &PyLong_Type || type == &PyUnicode_Type;
        for (Py_ssize_t t = 0; !plain && t < PyTuple_GET_SIZE(self->kwarg_types); t++)
            plain = (PyObject *)type == PyTuple_GET_ITEM(self->kwarg_types, t); /* dtype, device, ... */
        PyObject *item = type == &PyFloat_Type ? argument_key(self, value)
                         : plain               ? PyTuple_Pack(2, (PyObject *)type, value)
                                               : NULL;
        if (item == NULL || !PyUnicode_CheckExact(name) || i + 2 > PyTuple_GET_SIZE(key)) {
            Py_XDECREF(item);
            Py_DECREF(key);
            return NULL;
        }
        PyTuple_SET_ITEM(key, i++, Py_NewRef(name));
        PyTuple_SET_ITEM(key, i++, item);
    }
    return key;
}

/* The JSON of an op's keyword arguments, a new reference: "{}" for none, else interned by
 * kwargs_key (capture/ops/arguments.py kwargs_json encodes a key's first call, as the Python path
 * does). NULL with no error set where the Python path must record the op. */
PyObject *keyword_json(OpRecorder *self, PyObject *kwargs) {
    if (!PyDict_CheckExact(kwargs)) return NULL;
    if (PyDict_GET_SIZE(kwargs) == 0) return Py_NewRef(s_empty_kwargs);
    PyObject *key = kwargs_key(self, kwargs);
    if (key == NULL) return NULL;
    PyObject *json = PyDict_GetItemWithError(self->interned_kwargs, key);
    if (json != NULL) {
        Py_DECREF(key);
        return Py_NewRef(json);
    }
    if (!PyErr_Occurred()) {
        if (PyDict_GET_SIZE(self->interned_kwargs) > INTERNED_LIMIT) PyDict_Clear(self->interned_kwargs);
        json = PyObject_CallOneArg(self->kwargs_json, kwargs);
        if (json != NULL && PyDict_SetItem(self->interned_kwargs, key, json) < 0) Py_CLEAR(json);
    }
    Py_DECREF(key);
    return json;
}

int is_plain_tensor(OpRecorder *self, PyObject *a) {
    return Py_TYPE(a) == (PyTypeObject *)self->tensor_type || Py_TYPE(a) == (PyTypeObject *)self->parameter_type;
}

/* The length of a non-empty list or tuple of plain tensors (cat's, stack's operands), else 0. */
Py_ssize_t tensor_list_length(OpRecorder *self, PyObject *a) {
    if (!PyList_CheckExact(a) && !PyTuple_CheckExact(a)) return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
    for (Py_ssize_t j = 0; j < n; j++)
        if (!is_plain_tensor(self, PySequence_Fast_GET_ITEM(a, j))) return 0;
    return n;
}

/* The JSON of a tuple or list out (a new reference), made once per shape by arguments.py
 * out_list_json and kept in out_list_jsons; NULL with an exception set. */
PyObject *out_list_json(OpRecorder *self, long long out_key) {
    PyObject *key = PyLong_FromLongLong(out_key);
    if (key == NULL) return NULL;
    PyObject *json = PyDict_GetItemWithError(self->out_list_jsons, key);
    if (json != NULL) {
        Py_DECREF(key);
        return Py_NewRef(json);
    }
    if (PyErr_Occurred() || (json = PyObject_CallOneArg(self->out_list_json, key)) == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    if (PyDict_GET_SIZE(self->out_list_jsons) > INTERNED_LIMIT) PyDict_Clear(self->out_list_jsons);
    int stored = PyDict_SetItem(self->out_list_jsons, key, json);
    Py_DECREF(key);
    if (stored < 0) Py_CLEAR(json);
    return json;
}
