/* spiketrace.capture.native._native.IntColumn: a growable column of fixed-width integers (1, 2, 4 or 8 bytes, as
 * array's typecodes b, h, i, q), for the buffers the per-op record fills.
 *
 * It is what array.array is to capture/store/table_buffer.py (append, extend, len, index, set an
 * item, delete a prefix or a suffix, count, tobytes), plus a C entry the compiled record calls
 * with a C integer (int_column_append), where array's append would parse each value with
 * PyArg_Parse from a Python int made for it. Slices come back as lists (their readers sum or
 * iterate them).
 *
 * A 'q' column holds its items in 4 bytes until one needs 8, then widens all of them in place
 * (`itemsize` says which; tobytes gives that width): seq numbers, tensor ids, versions and
 * counts fit 32 bits for hours of recording, so a buffered event holds ~50 bytes less (a
 * pointer column widens at its first item). The values are the same either way.
 */
#include "native.h"


typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t length, allocated; /* in items */
    long long low, high;          /* the values the typecode holds */
    int itemsize;                 /* bytes an item now: 4 for a 'q' column until it widens to 8 */
    char typecode;
} IntColumn;

static const struct {
    char typecode;
    int itemsize;
    long long low, high;
} WIDTHS[] = {{'b', 1, INT8_MIN, INT8_MAX}, {'h', 2, INT16_MIN, INT16_MAX},
              {'i', 4, INT32_MIN, INT32_MAX}, {'q', 8, INT64_MIN, INT64_MAX}};

static void put(IntColumn *c, Py_ssize_t i, long long v) {
    switch (c->itemsize) {
        case 1: ((int8_t *)c->data)[i] = (int8_t)v; break;
        case 2: ((int16_t *)c->data)[i] = (int16_t)v; break;
        case 4: ((int32_t *)c->data)[i] = (int32_t)v; break;
        default: ((int64_t *)c->data)[i] = (int64_t)v; break;
    }
}

static long long get(const IntColumn *c, Py_ssize_t i) {
    switch (c->itemsize) {
        case 1: return ((const int8_t *)c->data)[i];
        case 2: return ((const int16_t *)c->data)[i];
        case 4: return ((const int32_t *)c->data)[i];
        default: return ((const int64_t *)c->data)[i];
    }
}

/* Every item from 4 bytes to 8, last first (each lands at or after where it was read). */
static int widen(IntColumn *c) {
    Py_ssize_t size = c->allocated > 0 ? c->allocated : 64;
    char *data = PyMem_Realloc(c->data, (size_t)size * 8);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = c->length - 1; i >= 0; i--) ((int64_t *)data)[i] = ((const int32_t *)data)[i];
    c->data = data;
    c->allocated = size;
    c->itemsize = 8;
    return 0;
}

/* v within the typecode's range, and the items wide enough to hold it. */
static int make_room_for(IntColumn *c, long long v) {
    if (v < c->low || v > c->high) {
        PyErr_Format(PyExc_OverflowError, "IntColumn('%c'): %lld does not fit its type", c->typecode, v);
        return -1;
    }
    if (c->itemsize == 4 && c->typecode == 'q' && (v < INT32_MIN || v > INT32_MAX)) return widen(c);
    return 0;
}

static int reserve(IntColumn *c, Py_ssize_t wanted) {
    if (wanted <= c->allocated) return 0;
    Py_ssize_t size = wanted + (wanted >> 3) + 64; /* as list grows: amortised O(1) appends */
    char *data = PyMem_Realloc(c->data, (size_t)size * (size_t)c->itemsize);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    c->data = data;
    c->allocated = size;
    return 0;
}

int int_column_check(PyObject *object) { return Py_TYPE(object) == &IntColumnType; }

int int_column_append(PyObject *object, long long v) {
    IntColumn *c = (IntColumn *)object;
    if (make_room_for(c, v) < 0 || reserve(c, c->length + 1) < 0) return -1;
    put(c, c->length++, v);
    return 0;
}

static int value_of(PyObject *value, long long *out) {
    *out = PyLong_AsLongLong(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *column_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    const char *typecode;
    if (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0) {
        PyErr_SetString(PyExc_TypeError, "IntColumn(typecode) takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "s:IntColumn", &typecode)) return NULL;
    for (int i = 0; i < 4; i++) {
        if (typecode[0] == WIDTHS[i].typecode && typecode[1] == '\0') {
            IntColumn *c = (IntColumn *)type->tp_alloc(type, 0);
            if (c == NULL) return NULL;
            c->typecode = WIDTHS[i].typecode;
            c->itemsize = WIDTHS[i].itemsize < 4 ? WIDTHS[i].itemsize : 4;
            c->low = WIDTHS[i].low;
            c->high = WIDTHS[i].high;
            return (PyObject *)c;
        }
    }
    PyErr_Format(PyExc_ValueError, "IntColumn: typecode %R is not one of b, h, i, q", PyTuple_GET_ITEM(args, 0));
    return NULL;
}

static void column_dealloc(IntColumn *c) {
    PyMem_Free(c->data);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *column_append(IntColumn *c, PyObject *value) {
    long long v;
    if (value_of(value, &v) < 0 || int_column_append((PyObject *)c, v) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *column_extend(IntColumn *c, PyObject *iterable) {
    PyObject *iterator = PyObject_GetIter(iterable);
    if (iterator == NULL) return NULL;
    Py_ssize_t before = c->length;
    PyObject *item;
    while ((item = PyIter_Next(iterator)) != NULL) {
        long long v;
        int failed = value_of(item, &v) < 0 || int_column_append((PyObject *)c, v) < 0;
        Py_DECREF(item);
        if (failed) break;
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred()) {
        c->length = before; /* all or nothing, as array.extend of a bad sequence */
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *column_count(IntColumn *c, PyObject *value) {
    long long v;
    if (value_of(value, &v) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_OverflowError)) return NULL;
        PyErr_Clear();
        return PyLong_FromLong(0);
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < c->length; i++) n += get(c, i) == v;
    return PyLong_FromSsize_t(n);
}

static PyObject *column_tobytes(IntColumn *c, PyObject *unused) {
    (void)unused;
    return PyBytes_FromStringAndSize(c->data, c->length * c->itemsize);
}

static PyObject *column_sizeof(IntColumn *c, PyObject *unused) {
    (void)unused;
    return PyLong_FromSsize_t((Py_ssize_t)sizeof(IntColumn) + c->allocated * c->itemsize);
}

static Py_ssize_t column_length(IntColumn *c) { return c->length; }

static int normalise(IntColumn *c, Py_ssize_t *i) {
    if (*i < 0) *i += c->length;
    if (*i < 0 || *i >= c->length) {
        PyErr_SetString(PyExc_IndexError, "IntColumn index out of range");
        return -1;
    }
    return 0;
}

static PyObject *column_item(IntColumn *c, Py_ssize_t i) {
    if (normalise(c, &i) < 0) return NULL;
    return PyLong_FromLongLong(get(c, i));
}

static PyObject *column_subscript(IntColumn *c, PyObject *key) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        return column_item(c, i);
    }
    if (!PySlice_Check(key)) {
        PyErr_Format(PyExc_TypeError, "IntColumn indices are integers or slices, not %.100s", Py_TYPE(key)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
    Py_ssize_t n = PySlice_AdjustIndices(c->length, &start, &stop, step);
    PyObject *list = PyList_New(n);
    if (list == NULL) return NULL;
    for (Py_ssize_t k = 0, i = start; k < n; k++, i += step) {
        PyObject *v = PyLong_FromLongLong(get(c, i));
        if (v == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, k, v);
    }
    return list;
}

static int column_ass_subscript(IntColumn *c, PyObject *key, PyObject *value) {
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        long long v;
        if ((i == -1 && PyErr_Occurred()) || normalise(c, &i) < 0) return -1;
        if (value == NULL) {
            PyErr_SetString(PyExc_TypeError, "IntColumn deletes slices only");
            return -1;
        }
        if (value_of(value, &v) < 0 || make_room_for(c, v) < 0) return -1;
        put(c, i, v);
        return 0;
    }
    Py_ssize_t start, stop, step;
    if (!PySlice_Check(key) || value != NULL || PySlice_Unpack(key, &start, &stop, &step) < 0 || step != 1) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "IntColumn: only del column[a:b] on slices");
        return -1;
    }
    PySlice_AdjustIndices(c->length, &start, &stop, step);
    if (stop <= start) return 0;
    memmove(c->data + start * c->itemsize, c->data + stop * c->itemsize, (size_t)(c->length - stop) * c->itemsize);
    c->length -= stop - start;
    if (c->allocated > 1024 && c->length < c->allocated / 4) { /* a flush emptied it: give the memory back */
        Py_ssize_t size = c->length + (c->length >> 3) + 64;
        char *data = PyMem_Realloc(c->data, (size_t)size * (size_t)c->itemsize);
        if (data != NULL) {
            c->data = data;
            c->allocated = size;
        }
    }
    return 0;
}

static PyObject *column_typecode(IntColumn *c, void *closure) {
    (void)closure;
    return PyUnicode_FromStringAndSize(&c->typecode, 1);
}

static PyObject *column_itemsize(IntColumn *c, void *closure) {
    (void)closure;
    return PyLong_FromLong(c->itemsize);
}

static PyObject *column_repr(IntColumn *c) {
    return PyUnicode_FromFormat("IntColumn('%c', %zd values)", c->typecode, c->length);
}

static PyMethodDef column_methods[] = {
    {"append", (PyCFunction)column_append, METH_O, "append(value): one integer at the end"},
    {"extend", (PyCFunction)column_extend, METH_O, "extend(iterable): its integers at the end (all or none)"},
    {"count", (PyCFunction)column_count, METH_O, "count(value): how many items equal it"},
    {"tobytes", (PyCFunction)column_tobytes, METH_NOARGS, "tobytes(): the items in machine order, as array.tobytes"},
    {"__sizeof__", (PyCFunction)column_sizeof, METH_NOARGS, "the object and its allocated items, in bytes"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef column_getset[] = {
    {"typecode", (getter)column_typecode, NULL, "the array typecode of its width: b, h, i or q", NULL},
    {"itemsize", (getter)column_itemsize, NULL, "bytes an item now (a 'q' column: 4 until it widens to 8)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods column_sequence = {.sq_length = (lenfunc)column_length, .sq_item = (ssizeargfunc)column_item};
static PyMappingMethods column_mapping = {.mp_length = (lenfunc)column_length,
                                          .mp_subscript = (binaryfunc)column_subscript,
                                          .mp_ass_subscript = (objobjargproc)column_ass_subscript};

PyTypeObject IntColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spiketrace.capture.native._native.IntColumn",
    .tp_doc = "IntColumn(typecode): a growable column of b, h, i or q integers (capture/native/scan/column.c)",
    .tp_basicsize = sizeof(IntColumn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = column_new,
    .tp_dealloc = (destructor)column_dealloc,
    .tp_methods = column_methods,
    .tp_getset = column_getset,
    .tp_as_sequence = &column_sequence,
    .tp_as_mapping = &column_mapping,
    .tp_repr = (reprfunc)column_repr,
};
