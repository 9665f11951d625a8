/* The tensor states of a call, for the compiled record (capture/native/_native_record.c): phase 1
 * reads what each distinct tensor is now (tensor_facts: a known state, or a new one with its
 * statistics, from a rule or a scan, and its row's form), phase 2 writes a new state's row and
 * registry entry (write_state), exactly as capture/tensors/registry.py's TensorRegistry.describe does. */
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

/* Whether t's storage holds every element t views now: allocated, and at least
 * (offset + the last element's index + 1) elements long. A storage can be freed or shrunk
 * under a live tensor (FSDP frees resharded parameters with untyped_storage().resize_(0)), and
 * its data_ptr then points at nothing or at fewer bytes than the view spans. 1 yes, 0 no
 * (the Python path then leaves the statistics null), -1 error. */
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

/* The statistics of a new state, (nnz, is01), read now from its memory; NULL with no error
 * where the Python path must take them (not a plain CPU strided tensor of a known format, or
 * one whose storage does not hold what it views). */
static PyObject *scan_tensor(OpRecorder *self, PyObject *t, PyObject *dtype, PyObject *shape, PyObject *stride,
                             long long offset, long long *data_ptr, int64_t numel) {
    PyObject *format = PyDict_GetItemWithError(self->bit_formats, dtype);
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
        long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(format, 0));
        int holds = element_size > 0 ? storage_holds(t, offset, sizes, steps, ndim, element_size) : 0;
        if (holds <= 0) return NULL;
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

/* The dict *slot, made at first use (a borrowed reference), or NULL with an error set. */
static PyObject *cache(PyObject **slot) {
    if (*slot == NULL) *slot = PyDict_New();
    return *slot;
}

/* A CPU tensor's kind (dtype name, element size, device string), a new reference: by its
 * dtype alone, every CPU tensor's device being the same; the registry's (dtype, device)
 * table, or its kind_of, the first time a dtype is met. */
static PyObject *cpu_kind(OpRecorder *self, PyObject *t, PyObject *dtype) {
    PyObject *kinds = cache(&self->cpu_kinds);
    if (kinds == NULL) return NULL;
    PyObject *kind = PyDict_GetItemWithError(kinds, dtype);
    if (kind != NULL) return Py_NewRef(kind);
    if (PyErr_Occurred()) return NULL;
    PyObject *device = tensor_attribute(t, TENSOR_DEVICE);
    PyObject *kind_key = device ? PyTuple_Pack(2, dtype, device) : NULL;
    Py_XDECREF(device);
    if (kind_key == NULL) return NULL;
    kind = PyDict_GetItemWithError(self->kinds, kind_key);
    Py_DECREF(kind_key);
    if (kind != NULL) Py_INCREF(kind);
    else if (!PyErr_Occurred()) kind = PyObject_CallOneArg(self->make_kind, t); /* fills the registry's table */
    if (kind != NULL && (!PyTuple_CheckExact(kind) || PyTuple_GET_SIZE(kind) != 3)) {
        PyErr_SetString(PyExc_TypeError, "OpRecorder: a tensor kind must be a 3-tuple");
        Py_CLEAR(kind);
    }
    if (kind != NULL && PyDict_SetItem(kinds, dtype, kind) < 0) Py_CLEAR(kind);
    return kind;
}

/* The interned row kind of a CPU state (capture/tensors/registry.py _write_row's, is_meta False), a new
 * reference, keyed by (dtype, requires_grad, parameter name): a dtype hashes by identity, where
 * the registry's (dtype, device) key hashed a torch.device (~1,000 instructions a lookup). */
static PyObject *cpu_row_kind(OpRecorder *self, PyObject *t, PyObject *dtype, PyObject *requires_grad,
                              PyObject *name) {
    PyObject *row_kinds = cache(&self->cpu_row_kinds), *forms = cache(&self->cpu_forms);
    if (row_kinds == NULL || forms == NULL) return NULL;
    PyObject *key = PyTuple_Pack(3, dtype, requires_grad, name);
    if (key == NULL) return NULL;
    PyObject *row_kind = PyDict_GetItemWithError(row_kinds, key);
    if (row_kind != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(row_kind);
    }
    PyObject *kind = cpu_kind(self, t, dtype);
    if (kind == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    row_kind = PyTuple_Pack(7, PyTuple_GET_ITEM(kind, 0), PyTuple_GET_ITEM(kind, 1), PyTuple_GET_ITEM(kind, 2),
                            requires_grad, Py_False, name == Py_None ? Py_False : Py_True, name);
    Py_DECREF(kind);
    if (row_kind != NULL && PyDict_GET_SIZE(row_kinds) > ROW_KINDS_LIMIT) {
        PyDict_Clear(row_kinds);
        PyDict_Clear(forms); /* keyed by the ids of the row kinds just let go */
    }
    if (row_kind != NULL && PyDict_SetItem(row_kinds, key, row_kind) < 0) Py_CLEAR(row_kind);
    Py_DECREF(key);
    return row_kind;
}

/* The interned form (shape, stride, offset, numel, *row kind) of a CPU state, a new reference,
 * keyed by (shape, stride, offset, id(row kind)): the row kind is interned in cpu_row_kinds,
 * which lets go of one only together with every form keyed by it. */
static PyObject *cpu_form(OpRecorder *self, PyObject *shape, PyObject *stride, PyObject *offset, int64_t numel,
                          PyObject *row_kind) {
    PyObject *forms = self->cpu_forms, *identity = PyLong_FromVoidPtr(row_kind);
    PyObject *key = identity ? PyTuple_Pack(4, shape, stride, offset, identity) : NULL;
    Py_XDECREF(identity);
    if (key == NULL) return NULL;
    PyObject *form = PyDict_GetItemWithError(forms, key);
    if (form != NULL || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(form);
    }
    PyObject *numel_object = PyLong_FromLongLong(numel);
    form = numel_object ? PyTuple_New(4 + 7) : NULL;
    if (form != NULL) {
        PyTuple_SET_ITEM(form, 0, Py_NewRef(shape));
        PyTuple_SET_ITEM(form, 1, Py_NewRef(stride));
        PyTuple_SET_ITEM(form, 2, Py_NewRef(offset));
        PyTuple_SET_ITEM(form, 3, Py_NewRef(numel_object));
        for (int i = 0; i < 7; i++) PyTuple_SET_ITEM(form, 4 + i, Py_NewRef(PyTuple_GET_ITEM(row_kind, i)));
        if (PyDict_GET_SIZE(forms) > FORMS_LIMIT) PyDict_Clear(forms);
        if (PyDict_SetItem(forms, key, form) < 0) Py_CLEAR(form);
    }
    Py_XDECREF(numel_object);
    Py_DECREF(key);
    return form;
}

/* Phase 1 for a tensor whose state is new: its statistics and its row's form. 1 done, 0 leave
 * the op to Python, -1 error. */
static int new_state(OpRecorder *self, Facts *f) {
    PyObject *t = f->tensor;
    PyObject *v;
    if ((Py_TYPE(t) != (PyTypeObject *)self->tensor_type && Py_TYPE(t) != (PyTypeObject *)self->parameter_type))
        return 0;
    v = tensor_attribute(t, TENSOR_IS_CPU);
    if (v == NULL) return -1;
    int cpu = v == Py_True;
    Py_DECREF(v);
    v = tensor_attribute(t, TENSOR_LAYOUT);
    if (v == NULL) return -1;
    int strided = v == self->strided;
    Py_DECREF(v);
    v = tensor_attribute(t, TENSOR_IS_META);
    if (v == NULL) return -1;
    int meta = v == Py_True;
    Py_DECREF(v);
    if (!cpu || !strided || meta) return 0;
    int64_t numel = shape_numel(f->shape);
    if (numel < 0) return -1;
    int result = -1;
    PyObject *stride = NULL, *offset_object = NULL, *dtype = NULL, *row_kind = NULL;
    long long data_ptr = 0;
    if ((stride = PyObject_CallMethodNoArgs(t, s_stride)) == NULL) goto done;
    if ((offset_object = PyObject_CallMethodNoArgs(t, s_storage_offset)) == NULL) goto done;
    long long offset = PyLong_AsLongLong(offset_object);
    if (PyErr_Occurred()) goto done;
    if (numel > 0) {
        PyObject *p = PyObject_CallMethodNoArgs(t, s_data_ptr);
        if (p == NULL) { /* storage not allocated: the Python path leaves its statistics null */
            PyErr_Clear();
            result = 0;
            goto done;
        }
        data_ptr = PyLong_AsLongLong(p);
        Py_DECREF(p);
        if (PyErr_Occurred()) goto done;
    }
    if ((dtype = tensor_attribute(t, TENSOR_DTYPE)) == NULL) goto done;
    if (f->stats == NULL) {
        f->stats = scan_tensor(self, t, dtype, f->shape, stride, offset, &data_ptr, numel);
        if (f->stats == NULL) {
            result = PyErr_Occurred() ? -1 : 0;
            goto done;
        }
    }
    PyObject *name = PyDict_GetItemWithError(self->parameter_names, f->key);
    if (name == NULL) {
        if (PyErr_Occurred()) goto done;
        name = Py_None;
    }
    row_kind = cpu_row_kind(self, t, dtype, f->requires_grad ? Py_True : Py_False, name);
    if (row_kind == NULL) goto done;
    long long element_size = PyLong_AsLongLong(PyTuple_GET_ITEM(row_kind, 1));
    if (element_size == -1 && PyErr_Occurred()) goto done;
    if (numel > 0) {
        f->storage = data_ptr - offset * element_size;
    } else {
        PyObject *p = PyObject_CallOneArg(self->storage_pointer, t);
        if (p == NULL) goto done;
        f->storage = PyLong_AsLongLong(p);
        Py_DECREF(p);
        if (PyErr_Occurred()) goto done;
    }
    if ((f->form = cpu_form(self, f->shape, stride, offset_object, numel, row_kind)) == NULL) goto done;
    result = 1;
done:
    Py_XDECREF(row_kind);
    Py_XDECREF(dtype);
    Py_XDECREF(offset_object);
    Py_XDECREF(stride);
    return result;
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
    PyObject *version = tensor_attribute(t, TENSOR_VERSION);
    f->version = version != NULL ? PyLong_AsLongLong(version) : -1;
    Py_XDECREF(version);
    if (f->version == -1 && PyErr_Occurred()) { /* an inference tensor keeps no version counter: the Python path knows it */
        PyErr_Clear();
        return 0;
    }
    f->shape = tensor_attribute(t, TENSOR_SHAPE);
    if (f->shape == NULL) return -1;
    PyObject *rg = tensor_attribute(t, TENSOR_REQUIRES_GRAD);
    if (rg == NULL) return -1;
    f->requires_grad = rg == Py_True;
    Py_DECREF(rg);
    f->written = 0;
    long level = PyLong_AsLong(self->level);
    /* statistics of this state: every state, or a wanted operand's (a hook's tensor is wanted
     * when wanted_positions is True itself, capture/native/_native_hooks.c) */
    int take = level == 2 || (level == 1 && position < 0 && wanted_positions == Py_True);
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
        if (inherit->source_stats != NULL) { /* capture/tensors/propagation.py _elements, exactly */
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
    long long tensor_id = counter_take(self->tensor_ids);
    if (tensor_id < 0) return -1;
    long long uid;
    if (f->entry == NULL) {
        uid = counter_take(self->uids);
        if (uid < 0) return -1;
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
