/* A plain tensor's attributes read through torch's own getters, found once per tensor type.
 *
 * PyObject_GetAttr(tensor, "shape") looks the name up in the type's MRO, checks for a data
 * descriptor, then calls it: the lookup is a large part of each read, and the compiled record
 * reads a dozen tensor attributes an op. Every attribute read here (_version, shape, requires_grad,
 * dtype, device, is_cpu, layout, is_meta) is a getset descriptor of torch._C.TensorBase: a
 * data descriptor, which Python's attribute lookup gives precedence over an instance's
 * __dict__, so calling its getter is exactly what PyObject_GetAttr does, as long as the type
 * still resolves the name to that descriptor and reads attributes the generic way. Both are
 * checked: the descriptors are looked up again whenever the type's version tag changes (any
 * assignment to the type or its bases), and a type with its own __getattribute__ or
 * __getattr__, or a name that resolves to anything but a getset descriptor, is read through
 * PyObject_GetAttr itself. */
#include "record/record.h"

#include <descrobject.h>

#define ATTRIBUTE_TYPES 4

typedef struct {
    PyTypeObject *type;      /* a strong reference, or NULL for a free slot */
    unsigned int version_tag; /* the type's tag when the getters were found */
    PyGetSetDef *getters[TENSOR_ATTRIBUTES]; /* NULL where the name is not a getset descriptor */
    PyObject *descriptors[TENSOR_ATTRIBUTES]; /* the descriptors, held so their getters stay valid */
} AttributeTable;

static AttributeTable tables[ATTRIBUTE_TYPES];
static int next_slot; /* where a new type goes once every slot is taken */

static PyObject **const attribute_names[TENSOR_ATTRIBUTES] = {
    [TENSOR_VERSION] = &s_version, [TENSOR_SHAPE] = &s_shape,   [TENSOR_REQUIRES_GRAD] = &s_requires_grad,
    [TENSOR_DTYPE] = &s_dtype,     [TENSOR_DEVICE] = &s_device, [TENSOR_IS_CPU] = &s_is_cpu,
    [TENSOR_LAYOUT] = &s_layout,   [TENSOR_IS_META] = &s_is_meta,
};

static void clear_table(AttributeTable *table) {
    for (int i = 0; i < TENSOR_ATTRIBUTES; i++) {
        Py_CLEAR(table->descriptors[i]);
        table->getters[i] = NULL;
    }
    Py_CLEAR(table->type);
}

/* The type's getters, found now: 0, or -1 where the type has no valid version tag to key
 * them by (they are then not kept). */
static int fill_table(AttributeTable *table, PyTypeObject *type) {
    clear_table(table);
    for (int i = 0; i < TENSOR_ATTRIBUTES; i++) {
        PyObject *descriptor = _PyType_Lookup(type, *attribute_names[i]); /* borrowed; assigns a tag */
        if (descriptor != NULL && Py_IS_TYPE(descriptor, &PyGetSetDescr_Type) &&
            ((PyGetSetDescrObject *)descriptor)->d_getset->get != NULL) {
            table->descriptors[i] = Py_NewRef(descriptor);
            table->getters[i] = ((PyGetSetDescrObject *)descriptor)->d_getset;
        }
    }
    if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) {
        clear_table(table);
        return -1;
    }
    table->type = (PyTypeObject *)Py_NewRef((PyObject *)type);
    table->version_tag = type->tp_version_tag;
    return 0;
}

/* The table of t's type, current; NULL where its attributes are read the generic way. */
static AttributeTable *table_of(PyTypeObject *type) {
    if (type->tp_getattro != PyObject_GenericGetAttr) return NULL; /* its own attribute lookup */
    for (int i = 0; i < ATTRIBUTE_TYPES; i++) {
        AttributeTable *table = &tables[i];
        if (table->type != type) continue;
        if (PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG) && type->tp_version_tag == table->version_tag)
            return table;
        return fill_table(table, type) == 0 ? table : NULL; /* the type changed since */
    }
    AttributeTable *table = NULL;
    for (int i = 0; i < ATTRIBUTE_TYPES && table == NULL; i++)
        if (tables[i].type == NULL) table = &tables[i];
    if (table == NULL) { /* more tensor types than slots: they take turns */
        table = &tables[next_slot];
        next_slot = (next_slot + 1) % ATTRIBUTE_TYPES;
    }
    return fill_table(table, type) == 0 ? table : NULL;
}

PyObject *tensor_attribute(PyObject *t, TensorAttribute which) {
    AttributeTable *table = table_of(Py_TYPE(t));
    PyGetSetDef *getter = table != NULL ? table->getters[which] : NULL;
    if (getter != NULL) return getter->get(t, getter->closure);
    return PyObject_GetAttr(t, *attribute_names[which]);
}

/* tensor_attributes(t) -> the attributes tensor_attribute reads, in TensorAttribute's order
 * (for the tests, which compare them with getattr's). */
PyObject *native_tensor_attributes(PyObject *self, PyObject *t) {
    (void)self;
    PyObject *values = PyTuple_New(TENSOR_ATTRIBUTES);
    for (int i = 0; values != NULL && i < TENSOR_ATTRIBUTES; i++) {
        PyObject *value = tensor_attribute(t, (TensorAttribute)i);
        if (value == NULL) Py_CLEAR(values);
        else PyTuple_SET_ITEM(values, i, value);
    }
    return values;
}
