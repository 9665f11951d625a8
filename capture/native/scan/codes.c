/* identity_codes(rows) -> (codes, distinct): for a list of objects, the index in `distinct`
 * of each row's object, by identity (int32 codes, as bytes), and the distinct objects in
 * first-seen order. capture/store/table_buffer.py converts a grouped column's few hundred
 * distinct interned tuples once and takes them per row; this maps the rows to them in one pass
 * where a Python loop of id() lookups would cost a large part of a flush. Every row holds its
 * object alive while this runs, so a pointer names one. */
#include "native.h"

/* Open addressing, load at most 1/2: object pointer -> code. */
typedef struct {
    PyObject **keys;
    int32_t *values;
    size_t capacity; /* a power of two */
} CodeTable;

static size_t slot_of(const CodeTable *table, PyObject *key) {
    size_t slot = (((uintptr_t)key >> 4) * 0x9E3779B97F4A7C15ull) & (table->capacity - 1);
    while (table->keys[slot] != NULL && table->keys[slot] != key) slot = (slot + 1) & (table->capacity - 1);
    return slot;
}

static int table_init(CodeTable *table, size_t capacity) {
    table->keys = PyMem_Calloc(capacity, sizeof(PyObject *));
    table->values = PyMem_Malloc(capacity * sizeof(int32_t));
    table->capacity = capacity;
    if (table->keys == NULL || table->values == NULL) {
        PyMem_Free(table->keys);
        PyMem_Free(table->values);
        table->keys = NULL, table->values = NULL;
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void table_free(CodeTable *table) {
    PyMem_Free(table->keys);
    PyMem_Free(table->values);
}

/* The table twice as large, every key rehashed: 0, or -1 with MemoryError (the table kept). */
static int table_grow(CodeTable *table) {
    CodeTable grown;
    if (table_init(&grown, table->capacity * 2) < 0) return -1;
    for (size_t k = 0; k < table->capacity; k++) {
        if (table->keys[k] == NULL) continue;
        size_t s = slot_of(&grown, table->keys[k]);
        grown.keys[s] = table->keys[k];
        grown.values[s] = table->values[k];
    }
    table_free(table);
    *table = grown;
    return 0;
}

PyObject *native_identity_codes(PyObject *self, PyObject *rows) {
    (void)self;
    if (!PyList_CheckExact(rows)) {
        PyErr_SetString(PyExc_TypeError, "identity_codes: rows must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(rows);
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "identity_codes: too many rows for int32 codes");
        return NULL;
    }
    CodeTable table;
    if (table_init(&table, 1024) < 0) return NULL;
    PyObject *codes = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int32_t));
    PyObject *distinct = PyList_New(0), *result = NULL;
    if (codes == NULL || distinct == NULL) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(codes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        size_t slot = slot_of(&table, row);
        if (table.keys[slot] == row) {
            out[i] = table.values[slot];
            continue;
        }
        Py_ssize_t code = PyList_GET_SIZE(distinct);
        if (PyList_Append(distinct, row) < 0) goto done;
        table.keys[slot] = row;
        table.values[slot] = (int32_t)code;
        out[i] = (int32_t)code;
        if ((size_t)(code + 1) * 2 > table.capacity && table_grow(&table) < 0) goto done;
    }
    result = PyTuple_Pack(2, codes, distinct);
done:
    table_free(&table);
    Py_XDECREF(codes);
    Py_XDECREF(distinct);
    return result;
}
