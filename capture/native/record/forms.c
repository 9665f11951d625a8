/* Phase 1 of the compiled record for a tensor whose state is new (record/state.c): its
 * statistics, read from its memory by the one-pass scan where no rule gave them (a CPU tensor's;
 * a device tensor's, and every one's under defer_statistics, are taken on the device at write),
 * and its row's interned $form (capture/tensors/registry.py _write_row's, for a plain strided
 * tensor on any device). */
#include "record/record.h"

/* A row kind member's index: a form's members from FORM_DTYPE on are its row kind. */
#define KIND(field) ((field) - FORM_DTYPE)

/* Whether t's storage holds every element t views now: allocated, and at least
 * (offset + the last element's index + 1) elements long. A storage can be freed or shrunk
 * under a live tensor (FSDP frees resharded parameters with untyped_storage().resize_(0)), and
 * its data_ptr then points at nothing or at fewer bytes than the view spans. 1 yes, 0 no
 * (the Python path then leaves the statistics null), -1 error. registry.py has_values is the
 * Python path's same check. */
static int storage_holds(PyObject *t, long long offset, const int64_t *sizes, const int64_t *steps,
                         Py_ssize_t ndim, long long element_size) {
    int64_t last = offset;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        if (sizes[d] <= 0) return 1; /* nothing to read */
        if (steps[d] < 0) return 0;
        last += (sizes[d] - 1) * steps[d];
    }
    PyObject *storage = PyObject_CallMethodNoArgs(t, s_untyped_storage);
    if (storage == NULL) {
        PyErr_Clear(); /* no storage to read (the Python path decides) */
        return 0;
    }
    PyObject *address = PyObject_CallMethodNoArgs(storage, s_data_ptr);
    PyObject *nbytes = address ? PyObject_CallMethodNoArgs(storage, s_nbytes) : NULL;
    Py_DECREF(storage);
    if (nbytes == NULL) {
        Py_XDECREF(address);
        return -1;
    }
    long long base = PyLong_AsLongLong(address), bytes = PyLong_AsLongLong(nbytes);
    Py_DECREF(address);
    Py_DECREF(nbytes);
    if (PyErr_Occurred()) return -1;
    return base != 0 && last >= 0 && (last + 1) * element_size <= bytes;
}

/* storage_holds for a view given by its shape and stride tuples: 1, 0 (or more than MAX_DIMS
 * dimensions: not checked here), -1 error. */
static int view_fits(PyObject *t, PyObject *shape, PyObject *stride, long long offset, long long element_size) {
    int64_t sizes[MAX_DIMS], steps[MAX_DIMS];
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (ndim > MAX_DIMS || PyTuple_GET_SIZE(stride) != ndim || element_size <= 0) return 0;
    for (Py_ssize_t d = 0; d < ndim; d++) {
        sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
        steps[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
    }
    if (PyErr_Occurred()) return -1;
    return storage_holds(t, offset, sizes, steps, ndim, element_size);
}

/* The statistics of a new state, (nnz, is01), read now from its memory; NULL with no error
 * where the Python path must take them (not a plain CPU strided tensor of a known format, or
 * one whose storage does not hold what it views). */
static PyObject *scan_tensor(OpRecorder *self, PyObject *t, PyObject *dtype, PyObject *shape, PyObject *stride,
                             long long offset, long long data_ptr, int64_t numel) {
    PyObject *format = PyDict_GetItemWithError(self->bit_formats, dtype); /* a BitFormat (checked at init) */
    if (format == NULL) return NULL;
    PyObject *neg = PyObject_CallMethodNoArgs(t, s_is_neg);
    if (neg == NULL) return NULL;
    int negated = PyObject_IsTrue(neg);
    Py_DECREF(neg);
    if (negated) return NULL;
    int64_t nnz = 0, ones = 0;
    if (numel > 0) {
        int64_t sizes[MAX_DIMS], steps[MAX_DIMS];
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        if (ndim > MAX_DIMS || PyTuple_GET_SIZE(stride) != ndim) return NULL;
        for (Py_ssize_t d = 0; d < ndim; d++) {
            sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            steps[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
        }
        if (PyErr_Occurred()) return NULL;
        long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(format, FORMAT_ELEMENT_SIZE));
        int holds = element_size > 0 ? storage_holds(t, offset, sizes, steps, ndim, element_size) : 0;
        if (holds <= 0) return NULL;
        int binary_type = PyObject_IsTrue(PyTuple_GET_ITEM(format, FORMAT_BINARY_TYPE));
        if (native_scan_counts((uintptr_t)data_ptr, element_size,
                               PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(format, FORMAT_ZERO_MASK)),
                               PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(format, FORMAT_ONE_BITS)),
                               !binary_type, (int)ndim, sizes, steps, &nnz, &ones) < 0)
            return NULL;
        if (binary_type) ones = nnz; /* 0/1 by its type (bool) */
    }
    return stats_tuple((long long)nnz, ones == nnz ? Py_True : Py_False);
}

/* The dict *slot, made at first use (a borrowed reference), or NULL with an error set. */
static PyObject *cache(PyObject **slot) {
    if (*slot == NULL) *slot = PyDict_New();
    return *slot;
}

/* A state's kind (dtype name, element size, device string), a new reference: a CPU state's by
 * its dtype alone, every CPU tensor's device being the same, a device state's by (dtype,
 * device) (`device` not NULL); the registry's (dtype, device) table, or its kind_of, the first
 * time one is met. */
static PyObject *state_kind(OpRecorder *self, PyObject *t, PyObject *dtype, PyObject *device) {
    PyObject *kinds = cache(&self->state_kinds);
    if (kinds == NULL) return NULL;
    PyObject *own_key = device == NULL ? Py_NewRef(dtype) : PyTuple_Pack(2, dtype, device);
    if (own_key == NULL) return NULL;
    PyObject *kind = PyDict_GetItemWithError(kinds, own_key);
    if (kind != NULL || PyErr_Occurred()) {
        Py_DECREF(own_key);
        return Py_XNewRef(kind);
    }
    PyObject *kind_key = device != NULL ? Py_NewRef(own_key) : NULL;
    if (kind_key == NULL) {
        PyObject *cpu = tensor_attribute(t, TENSOR_DEVICE);
        kind_key = cpu ? PyTuple_Pack(2, dtype, cpu) : NULL;
        Py_XDECREF(cpu);
    }
    if (kind_key == NULL) {
        Py_DECREF(own_key);
        return NULL;
    }
    kind = PyDict_GetItemWithError(self->kinds, kind_key);
    Py_DECREF(kind_key);
    if (kind != NULL) Py_INCREF(kind);
    else if (!PyErr_Occurred()) kind = PyObject_CallOneArg(self->make_kind, t); /* fills the registry's table */
    if (kind != NULL && (!PyTuple_CheckExact(kind) || PyTuple_GET_SIZE(kind) != KIND_FIELDS)) {
        PyErr_SetString(PyExc_TypeError, "OpRecorder: a tensor kind must be a 3-tuple");
        Py_CLEAR(kind);
    }
    if (kind != NULL && PyDict_SetItem(kinds, own_key, kind) < 0) Py_CLEAR(kind);
    Py_DECREF(own_key);
    return kind;
}

/* The interned row kind of a state (registry.py _write_row's, is_meta False), a new reference,
 * keyed by (dtype, requires_grad, parameter name), and a device state's by its device too
 * (`device` not NULL): a dtype hashes by identity, where the registry's (dtype, device) key
 * hashes a torch.device, a longer lookup a CPU state need not make. */
static PyObject *state_row_kind(OpRecorder *self, PyObject *t, PyObject *dtype, PyObject *requires_grad,
                                PyObject *name, PyObject *device) {
    PyObject *row_kinds = cache(&self->state_row_kinds), *forms = cache(&self->state_forms);
    if (row_kinds == NULL || forms == NULL) return NULL;
    PyObject *key = device == NULL ? PyTuple_Pack(3, dtype, requires_grad, name)
                                   : PyTuple_Pack(4, dtype, requires_grad, name, device);
    if (key == NULL) return NULL;
    PyObject *row_kind = PyDict_GetItemWithError(row_kinds, key);
    if (row_kind != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(row_kind);
    }
    PyObject *kind = state_kind(self, t, dtype, device);
    if (kind == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *values[ROW_KIND_FIELDS] = {
        [KIND(FORM_DTYPE)] = PyTuple_GET_ITEM(kind, 0),
        [KIND(FORM_ELEMENT_SIZE)] = PyTuple_GET_ITEM(kind, 1),
        [KIND(FORM_DEVICE)] = PyTuple_GET_ITEM(kind, 2),
        [KIND(FORM_REQUIRES_GRAD)] = requires_grad,
        [KIND(FORM_IS_META)] = Py_False,
        [KIND(FORM_IS_PARAMETER)] = name == Py_None ? Py_False : Py_True,
        [KIND(FORM_PARAMETER)] = name,
    };
    row_kind = pack_fields(values, ROW_KIND_FIELDS);
    Py_DECREF(kind);
    if (row_kind != NULL && PyDict_GET_SIZE(row_kinds) > ROW_KINDS_LIMIT) {
        PyDict_Clear(row_kinds);
        PyDict_Clear(forms); /* keyed by the ids of the row kinds just let go */
    }
    if (row_kind != NULL && PyDict_SetItem(row_kinds, key, row_kind) < 0) Py_CLEAR(row_kind);
    Py_DECREF(key);
    return row_kind;
}

/* The interned form (shape, stride, offset, numel, *row kind) of a state, a new reference,
 * keyed by (shape, stride, offset, id(row kind)): the row kind is interned in state_row_kinds,
 * which lets go of one only together with every form keyed by it. */
static PyObject *state_form(OpRecorder *self, PyObject *shape, PyObject *stride, PyObject *offset, int64_t numel,
                          PyObject *row_kind) {
    PyObject *forms = self->state_forms, *identity = PyLong_FromVoidPtr(row_kind);
    PyObject *key = identity ? PyTuple_Pack(4, shape, stride, offset, identity) : NULL;
    Py_XDECREF(identity);
    if (key == NULL) return NULL;
    PyObject *form = PyDict_GetItemWithError(forms, key);
    if (form != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(form);
    }
    PyObject *numel_object = PyLong_FromLongLong(numel);
    if (numel_object != NULL) {
        PyObject *values[FORM_FIELDS] = {[FORM_SHAPE] = shape, [FORM_STRIDE] = stride, [FORM_OFFSET] = offset,
                                         [FORM_NUMEL] = numel_object, [FORM_NESTED_SHAPES] = Py_None};
        for (int i = 0; i < ROW_KIND_FIELDS; i++) values[FORM_DTYPE + i] = PyTuple_GET_ITEM(row_kind, i);
        form = pack_fields(values, FORM_FIELDS);
    }
    if (form != NULL) {
        if (PyDict_GET_SIZE(forms) > FORMS_LIMIT) PyDict_Clear(forms);
        if (PyDict_SetItem(forms, key, form) < 0) Py_CLEAR(form);
    }
    Py_XDECREF(numel_object);
    Py_DECREF(key);
    return form;
}

/* How this record reads a state: READ_NOW a plain strided CPU tensor (its statistics scanned
 * here, under defer_statistics taken at write as a device's), READ_ON_DEVICE one on another
 * device (never scanned here: its memory is not the host's), 0 where the Python path describes
 * it (a subclass, another layout, meta), -1 error. */
enum { READ_NOW = 1, READ_ON_DEVICE = 2 };
static int state_reading(OpRecorder *self, PyObject *t) {
    if (!is_plain_tensor(self, t)) return 0;
    PyObject *v = tensor_attribute(t, TENSOR_LAYOUT);
    if (v == NULL) return -1;
    int strided = v == self->strided;
    Py_DECREF(v);
    if ((v = tensor_attribute(t, TENSOR_IS_META)) == NULL) return -1;
    int meta = v == Py_True;
    Py_DECREF(v);
    if (!strided || meta) return 0;
    if ((v = tensor_attribute(t, TENSOR_IS_CPU)) == NULL) return -1;
    int cpu = v == Py_True;
    Py_DECREF(v);
    return cpu ? READ_NOW : READ_ON_DEVICE;
}

/* The state's storage pointer: data_ptr less the offset's bytes, or (no element to point at)
 * the registry's storage_pointer(t). 0, or -1 with an exception set. */
static int storage_of(OpRecorder *self, Facts *f, int64_t numel, long long data_ptr, long long offset,
                      PyObject *row_kind) {
    long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(row_kind, KIND(FORM_ELEMENT_SIZE)));
    if (element_size == -1 && PyErr_Occurred()) return -1;
    if (numel > 0) {
        f->storage = data_ptr - offset * element_size;
        return 0;
    }
    PyObject *p = PyObject_CallOneArg(self->storage_pointer, f->tensor);
    if (p == NULL) return -1;
    f->storage = PyLong_AsLongLong(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 0;
}

/* The tensor's data pointer into *data_ptr where it has elements: 1, 0 where its storage is
 * not allocated (the Python path leaves its statistics null), -1 error. */
static int data_pointer(PyObject *t, int64_t numel, long long *data_ptr) {
    *data_ptr = 0;
    if (numel == 0) return 1;
    PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
    if (p == NULL) {
        PyErr_Clear();
        return 0;
    }
    *data_ptr = PyLong_AsLongLong(p);
    Py_DECREF(p);
    return PyErr_Occurred() ? -1 : 1;
}

/* Phase 1 for a new state: its statistics where known now (a scan of a CPU tensor's memory
 * where no rule gave them, DEFERRED where they are taken on the device at write) and its row's
 * form. `python_if_scanned`: an output whose rule runs in Python and whose scan would cost more
 * than that path, sent there unless it is not scanned here. 1 ready, 0 Python's, -1 error. */
int new_state(OpRecorder *self, Facts *f, int python_if_scanned) {
    PyObject *t = f->tensor;
    int reading = state_reading(self, t);
    if (reading <= 0) return reading;
    int on_device = reading == READ_ON_DEVICE, deferred = on_device || self->defer == Py_True;
    if (f->stats == NULL && !deferred && python_if_scanned) return 0;
    int64_t numel = shape_numel(f->shape);
    if (numel < 0) return -1;
    int result = -1;
    PyObject *stride = NULL, *offset_object = NULL, *dtype = NULL, *row_kind = NULL, *device = NULL;
    long long data_ptr = 0, offset;
    if ((stride = PyObject_CallMethodNoArgs(t, s_stride)) == NULL) goto done;
    if ((offset_object = PyObject_CallMethodNoArgs(t, s_storage_offset)) == NULL) goto done;
    offset = PyLong_AsLongLong(offset_object);
    if (PyErr_Occurred() || (result = data_pointer(t, numel, &data_ptr)) <= 0) goto done;
    result = -1;
    if ((dtype = tensor_attribute(t, TENSOR_DTYPE)) == NULL) goto done;
    if (f->stats == NULL && deferred) {
        f->stats = Py_NewRef(DEFERRED); /* taken at write, where the storage holds the view (below) */
    } else if (f->stats == NULL) { /* no rule gave them: a scan */
        f->stats = scan_tensor(self, t, dtype, f->shape, stride, offset, data_ptr, numel);
        if (f->stats == NULL) {
            result = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
    }
    PyObject *name = PyDict_GetItemWithError(self->parameter_names, f->key);
    if (name == NULL && PyErr_Occurred()) goto done;
    if (on_device && (device = tensor_attribute(t, TENSOR_DEVICE)) == NULL) goto done;
    row_kind = state_row_kind(self, t, dtype, f->requires_grad ? Py_True : Py_False, name != NULL ? name : Py_None,
                              device);
    if (row_kind == NULL || storage_of(self, f, numel, data_ptr, offset, row_kind) < 0) goto done;
    if (f->stats == DEFERRED && numel > 0) { /* registry.py has_values, for the device path */
        long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(row_kind, KIND(FORM_ELEMENT_SIZE)));
        int fits = PyErr_Occurred() ? -1 : view_fits(t, f->shape, stride, offset, element_size);
        if (fits < 0) goto done;
        if (!fits) Py_SETREF(f->stats, PyTuple_Pack(2, Py_None, Py_None)); /* null statistics */
        if (f->stats == NULL) goto done;
    }
    if ((f->form = state_form(self, f->shape, stride, offset_object, numel, row_kind)) != NULL) result = 1;
done:
    Py_XDECREF(device);
    Py_XDECREF(row_kind);
    Py_XDECREF(dtype);
    Py_XDECREF(offset_object);
    Py_XDECREF(stride);
    return result;
}
