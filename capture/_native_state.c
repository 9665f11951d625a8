/* The tensor states of a call, for the compiled record (capture/_native_record.c): phase 1
 * reads what each distinct tensor is now (tensor_facts: a known state, or a new one with its
 * statistics, from a rule or a scan, and its row's form), phase 2 writes a new state's row and
 * registry entry (write_state), exactly as capture/tensors.py's TensorRegistry.describe does. */
#include "_native_record.h"

void clear_facts(Facts *f, int n) {
    for (int i = 0; i < n; i++) {
        Py_XDECREF(f[i].key);
        Py_XDECREF(f[i].shape);
        Py_XDECREF(f[i].stats);
        Py_XDECREF(f[i].form);
        Py_XDECREF(f[i].entry);
    }
}

/* The statistics of a new state, (nnz, is01), read now from its memory; NULL with no error
 * where the Python path must take them (not a plain CPU strided tensor of a known format). */
static PyObject *scan_tensor(OpRecorder *self, PyObject *t, PyObject *shape, PyObject *stride, long long *data_ptr,
                             int64_t numel) {
    PyObject *dtype = PyObject_GetAttr(t, s_dtype);
    if (dtype == NULL) return NULL;
    PyObject *format = PyDict_GetItemWithError(self->bit_formats, dtype);
    Py_DECREF(dtype);
    if (format == NULL) return NULL;
    PyObject *neg = PyObject_CallMethodNoArgs(t, s_is_neg);
    if (neg == NULL) return NULL;
    int negated = PyObject_IsTrue(neg);
    Py_DECREF(neg);
    if (negated) return NULL;
    int64_t nnz = 0, ones = 0;
    if (numel > 0) {
        int64_t sizes[64], steps[64];
        Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
        if (ndim > 64 || PyTuple_GET_SIZE(stride) != ndim) return NULL;
        for (Py_ssize_t d = 0; d < ndim; d++) {
            sizes[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
            steps[d] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, d));
        }
        if (PyErr_Occurred()) return NULL;
        if (native_scan_counts((uintptr_t)*data_ptr, PyLong_AsLongLong(PyTuple_GET_ITEM(format, 0)),
                               PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(format, 1)),
                               PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(format, 2)),
                               !PyObject_IsTrue(PyTuple_GET_ITEM(format, 3)), (int)ndim, sizes, steps, &nnz,
                               &ones) < 0)
            return NULL;
        if (PyObject_IsTrue(PyTuple_GET_ITEM(format, 3))) ones = nnz; /* 0/1 by its type (bool) */
    }
    return stats_tuple((long long)nnz, ones == nnz ? Py_True : Py_False);
}

/* Phase 1 for a tensor whose state is new: its statistics and its row's form. 1 done, 0 leave
 * the op to Python, -1 error. */
static int new_state(OpRecorder *self, Facts *f) {
    PyObject *t = f->tensor;
    PyObject *v;
    if ((Py_TYPE(t) != (PyTypeObject *)self->tensor_type && Py_TYPE(t) != (PyTypeObject *)self->parameter_type))
        return 0;
    v = PyObject_GetAttr(t, s_is_cpu);
    if (v == NULL) return -1;
    int cpu = v == Py_True;
    Py_DECREF(v);
    v = PyObject_GetAttr(t, s_layout);
    if (v == NULL) return -1;
    int strided = v == self->strided;
    Py_DECREF(v);
    v = PyObject_GetAttr(t, s_is_meta);
    if (v == NULL) return -1;
    int meta = v == Py_True;
    Py_DECREF(v);
    if (!cpu || !strided || meta) return 0;
    int64_t numel = shape_numel(f->shape);
    if (numel < 0) return -1;
    PyObject *stride = PyObject_CallMethodNoArgs(t, s_stride);
    if (stride == NULL) return -1;
    PyObject *offset_object = PyObject_CallMethodNoArgs(t, s_storage_offset);
    if (offset_object == NULL) goto fail_stride;
    long long offset = PyLong_AsLongLong(offset_object);
    long long data_ptr = 0;
    PyObject *kind_key = NULL, *kind = NULL, *row_key = NULL, *row_kind = NULL, *form_key = NULL, *dtype = NULL,
             *device = NULL;
    if (PyErr_Occurred()) goto fail;
    if (numel > 0) {
        PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
        if (p == NULL) { /* storage not allocated: the Python path leaves its statistics null */
            PyErr_Clear();
            Py_DECREF(offset_object);
            Py_DECREF(stride);
            return 0;
        }
        data_ptr = PyLong_AsLongLong(p);
        Py_DECREF(p);
        if (PyErr_Occurred()) goto fail;
    }
    if (f->stats == NULL) {
        f->stats = scan_tensor(self, t, f->shape, stride, &data_ptr, numel);
        if (f->stats == NULL) {
            Py_DECREF(offset_object);
            Py_DECREF(stride);
            return PyErr_Occurred() ? -1 : 0;
        }
    }
    dtype = PyObject_GetAttr(t, s_dtype);
    device = dtype ? PyObject_GetAttr(t, s_device) : NULL;
    if (device == NULL) goto fail;
    kind_key = PyTuple_Pack(2, dtype, device);
    if (kind_key == NULL) goto fail;
    kind = PyDict_GetItemWithError(self->kinds, kind_key);
    if (kind == NULL) {
        if (PyErr_Occurred()) goto fail;
        kind = PyObject_CallOneArg(self->make_kind, t); /* fills the cache */
        if (kind == NULL) goto fail;
    } else {
        Py_INCREF(kind);
    }
    long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(kind, 1));
    if (numel > 0) {
        f->storage = data_ptr - offset * element_size;
    } else {
        PyObject *p = PyObject_CallOneArg(self->storage_pointer, t);
        if (p == NULL) goto fail;
        f->storage = PyLong_AsLongLong(p);
        Py_DECREF(p);
        if (PyErr_Occurred()) goto fail;
    }
    PyObject *name = PyDict_GetItemWithError(self->parameter_names, f->key);
    if (name == NULL) {
        if (PyErr_Occurred()) goto fail;
        name = Py_None;
    }
    PyObject *requires_grad = f->requires_grad ? Py_True : Py_False;
    row_key = PyTuple_Pack(4, kind_key, requires_grad, Py_False, name);
    if (row_key == NULL) goto fail;
    row_kind = PyDict_GetItemWithError(self->row_kinds, row_key);
    if (row_kind == NULL) {
        if (PyErr_Occurred()) goto fail;
        if (PyDict_GET_SIZE(self->row_kinds) > ROW_KINDS_LIMIT) PyDict_Clear(self->row_kinds);
        row_kind = PyTuple_Pack(7, PyTuple_GET_ITEM(kind, 0), PyTuple_GET_ITEM(kind, 1), PyTuple_GET_ITEM(kind, 2),
                                requires_grad, Py_False, name == Py_None ? Py_False : Py_True, name);
        if (row_kind == NULL || PyDict_SetItem(self->row_kinds, row_key, row_kind) < 0) goto fail;
    } else {
        Py_INCREF(row_kind);
    }
    PyObject *numel_object = PyLong_FromLongLong(numel);
    if (numel_object == NULL) goto fail;
    form_key = PyTuple_Pack(5, f->shape, stride, offset_object, numel_object, row_kind);
    if (form_key == NULL) {
        Py_DECREF(numel_object);
        goto fail;
    }
    PyObject *form = PyDict_GetItemWithError(self->forms, form_key);
    if (form == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(numel_object);
            goto fail;
        }
        if (PyDict_GET_SIZE(self->forms) > FORMS_LIMIT) PyDict_Clear(self->forms);
        form = PyTuple_New(4 + 7);
        if (form == NULL) {
            Py_DECREF(numel_object);
            goto fail;
        }
        PyTuple_SET_ITEM(form, 0, Py_NewRef(f->shape));
        PyTuple_SET_ITEM(form, 1, Py_NewRef(stride));
        PyTuple_SET_ITEM(form, 2, Py_NewRef(offset_object));
        PyTuple_SET_ITEM(form, 3, Py_NewRef(numel_object));
        for (int i = 0; i < 7; i++) PyTuple_SET_ITEM(form, 4 + i, Py_NewRef(PyTuple_GET_ITEM(row_kind, i)));
        if (PyDict_SetItem(self->forms, form_key, form) < 0) {
            Py_DECREF(form);
            Py_DECREF(numel_object);
            goto fail;
        }
    } else {
        Py_INCREF(form);
    }
    Py_DECREF(numel_object);
    f->form = form;
    Py_DECREF(form_key);
    Py_DECREF(row_kind);
    Py_DECREF(row_key);
    Py_DECREF(kind);
    Py_DECREF(kind_key);
    Py_DECREF(device);
    Py_DECREF(dtype);
    Py_DECREF(offset_object);
    Py_DECREF(stride);
    return 1;
fail:
    Py_XDECREF(form_key);
    Py_XDECREF(row_kind);
    Py_XDECREF(row_key);
    Py_XDECREF(kind);
    Py_XDECREF(kind_key);
    Py_XDECREF(device);
    Py_XDECREF(dtype);
    Py_XDECREF(offset_object);
fail_stride:
    Py_DECREF(stride);
    return -1;
}

int64_t shape_numel(PyObject *shape) {
    int64_t numel = 1;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++) numel *= PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    return PyErr_Occurred() ? -1 : numel;
}

/* The (nnz, is01) a fact's state has, or will have once written: borrowed; NULL where not
 * known (statistics skipped or null), as TensorRegistry.stats_of says for the Python path. */
PyObject *fact_stats(Facts *facts, int k) {
    Facts *f = facts[k].same_as >= 0 ? &facts[facts[k].same_as] : &facts[k];
    PyObject *stats = f->known ? PyList_GET_ITEM(f->entry, 5) : f->stats;
    if (stats == NULL || !PyTuple_CheckExact(stats) || PyTuple_GET_SIZE(stats) != 2 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(stats, 0)))
        return NULL;
    return stats;
}

/* Phase 1 for one distinct tensor: 1 ready, 0 leave the op to Python, -1 error. */
int tensor_facts(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
                        Py_ssize_t position, const Inheritance *inherit) {
    PyObject *t = f->tensor;
    if (!is_plain_tensor(self, t)) return 0;
    f->key = PyLong_FromVoidPtr(t);
    if (f->key == NULL) return -1;
    int failed = 0;
    f->version = long_attr(t, s_version, &failed);
    if (failed) { /* an inference tensor keeps no version counter: the Python path knows it */
        PyErr_Clear();
        return 0;
    }
    f->shape = PyObject_GetAttr(t, s_shape);
    if (f->shape == NULL) return -1;
    PyObject *rg = PyObject_GetAttr(t, s_requires_grad);
    if (rg == NULL) return -1;
    f->requires_grad = rg == Py_True;
    Py_DECREF(rg);
    f->written = 0;
    long level = PyLong_AsLong(self->level);
    int take = level == 2; /* statistics of this state: every state, or a wanted operand's */
    if (position >= 0) {
        PyObject *p = PyLong_FromSsize_t(position);
        if (p == NULL) return -1;
        f->written = PySet_Contains(written_positions, p);
        if (level == 1 && f->written >= 0) take = PySet_Contains(wanted_positions, p);
        Py_DECREF(p);
        if (f->written < 0 || take < 0) return -1;
    }
    f->entry = PyDict_GetItemWithError(self->entries, f->key);
    if (f->entry == NULL && PyErr_Occurred()) return -1;
    Py_XINCREF(f->entry);
    f->known = 0;
    if (f->entry != NULL) {
        if (!PyList_CheckExact(f->entry) || PyList_GET_SIZE(f->entry) != 7) return 0;
        PyObject **e = ((PyListObject *)f->entry)->ob_item;
        /* a state described without statistics, now wanted with them, is described again */
        int rescan = e[5] == self->skipped && take;
        if (!f->written && !rescan && PyLong_CheckExact(e[1]) && PyLong_AsLongLong(e[1]) == f->version) {
            int same_shape = PyObject_RichCompareBool(e[3], f->shape, Py_EQ);
            if (same_shape < 0) return -1;
            if (same_shape) {
                if (e[6] == (f->requires_grad ? Py_True : Py_False)) {
                    f->known = 1;
                    f->tensor_id = PyLong_AsLongLong(e[2]);
                    return PyErr_Occurred() ? -1 : 1;
                }
                /* only requires_grad changed: a new row with the statistics already taken */
                if (!PyTuple_CheckExact(e[5]) || PyTuple_GET_SIZE(e[5]) != 2) return 0;
                f->stats = Py_NewRef(e[5]);
            }
        }
    }
    if (f->stats == NULL && !take) f->stats = Py_NewRef(self->skipped); /* described, not scanned */
    if (f->stats == NULL && inherit != NULL) { /* an output to scan: what its rule gives instead */
        int64_t numel = shape_numel(f->shape);
        if (numel < 0) return -1;
        if (inherit->source_stats != NULL) { /* capture/propagation.py _elements, exactly */
            PyObject *nnz = PyTuple_GET_ITEM(inherit->source_stats, 0);
            PyObject *is01 = PyTuple_GET_ITEM(inherit->source_stats, 1);
            if (inherit->source_numel == numel) {
                f->stats = Py_NewRef(inherit->source_stats);
            } else if (inherit->source_numel == 0) {
                if (numel == 0) f->stats = stats_tuple(0LL, Py_True);
            } else {
                long long base = PyLong_AsLongLong(nnz);
                if (base == -1 && PyErr_Occurred()) return -1;
                f->stats = stats_tuple(base * (numel / inherit->source_numel), is01);
            }
            if (f->stats == NULL && PyErr_Occurred()) return -1;
        } else if (inherit->to_python && numel >= PYTHON_RULE_FROM) {
            return 0;
        }
    }
    return new_state(self, f);
}

/* Phase 2 for one distinct tensor with a new state: its row, its entry. */
int write_state(OpRecorder *self, Facts *f, long long seq) {
    int failed = 0;
    long long tensor_id = long_attr(self->registry, s_next_tensor_id, &failed);
    if (failed) return -1;
    PyObject *next = PyLong_FromLongLong(tensor_id + 1);
    if (next == NULL || PyObject_SetAttr(self->registry, s_next_tensor_id, next) < 0) {
        Py_XDECREF(next);
        return -1;
    }
    Py_DECREF(next);
    long long uid;
    if (f->entry == NULL) {
        uid = long_attr(self->registry, s_next_uid, &failed);
        if (failed) return -1;
        next = PyLong_FromLongLong(uid + 1);
        if (next == NULL || PyObject_SetAttr(self->registry, s_next_uid, next) < 0) {
            Py_XDECREF(next);
            return -1;
        }
        Py_DECREF(next);
    } else {
        uid = PyLong_AsLongLong(PyList_GET_ITEM(f->entry, 0));
        if (uid == -1 && PyErr_Occurred()) return -1;
    }
    PyObject *a = self->row_appends;
    if (append_long(a, 0, tensor_id) < 0 || append_long(a, 1, uid) < 0 || append_long(a, 2, f->version) < 0 ||
        append_long(a, 3, seq) < 0 || call_append(a, 4, f->form) < 0 || append_long(a, 5, f->storage) < 0 ||
        append_or_null(a, 6, PyTuple_GET_ITEM(f->stats, 0)) < 0 || append_or_null(a, 7, PyTuple_GET_ITEM(f->stats, 1)) < 0)
        return -1;
    PyObject *entry = f->entry;
    if (entry == NULL) {
        PyObject *ref = PyWeakref_NewRef(f->tensor, self->freed);  /* the registry's _freed: ours, or Python's */
        if (ref == NULL) return -1;
        PyObject *uid_object = PyLong_FromLongLong(uid);
        PyObject *value = uid_object ? PyTuple_Pack(2, f->key, uid_object) : NULL, *ref_id = PyLong_FromVoidPtr(ref);
        Py_XDECREF(uid_object);
        int r = value && ref_id ? PyDict_SetItem(self->refs, ref_id, value) : -1; /* by id: see tensors.py _refs */
        Py_XDECREF(value);
        Py_XDECREF(ref_id);
        if (r < 0) {
            Py_DECREF(ref);
            return -1;
        }
        entry = PyList_New(7); /* [uid, version, tensor_id, shape, ref, stats, requires_grad] */
        PyObject *uid_item = entry ? PyLong_FromLongLong(uid) : NULL;
        if (uid_item == NULL) {
            Py_XDECREF(entry);
            Py_DECREF(ref);
            return -1;
        }
        PyList_SET_ITEM(entry, 0, uid_item);
        for (int i = 1; i < 7; i++) PyList_SET_ITEM(entry, i, Py_NewRef(i == 4 ? ref : Py_None));
        Py_DECREF(ref);
        r = PyDict_SetItem(self->entries, f->key, entry);
        Py_DECREF(entry); /* the dict holds it */
        if (r < 0) return -1;
    }
    long long version = f->written && f->version >= 0 ? f->version + 1 : f->version;
    PyObject *v = PyLong_FromLongLong(version), *id = PyLong_FromLongLong(tensor_id);
    if (v == NULL || id == NULL) {
        Py_XDECREF(v);
        Py_XDECREF(id);
        return -1;
    }
    PyList_SetItem(entry, 1, v);
    PyList_SetItem(entry, 2, id);
    PyList_SetItem(entry, 3, Py_NewRef(f->shape));
    PyList_SetItem(entry, 5, Py_NewRef(f->stats));
    PyList_SetItem(entry, 6, Py_NewRef(f->requires_grad ? Py_True : Py_False));
    f->tensor_id = tensor_id;
    return 0;
}
