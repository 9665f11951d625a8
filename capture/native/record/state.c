/* The tensor states of a call, for the compiled record (record/record.c, record/hooks.c), exactly
 * as capture/tensors/registry.py's TensorRegistry.describe keeps them: phase 1 reads what each
 * distinct tensor is now (tensor_facts: a known state, or a new one, whose statistics and row
 * form record/forms.c reads), phase 2 writes a new state's row and registry entry
 * (write_state). And the registry's weakref callback (OpRecorder.freed). */
#include "record/record.h"

void clear_facts(Facts *f, int n) {
    for (int i = 0; i < n; i++) {
        Py_XDECREF(f[i].key);
        Py_XDECREF(f[i].shape);
        Py_XDECREF(f[i].stats);
        Py_XDECREF(f[i].form);
        Py_XDECREF(f[i].entry);
    }
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
    PyObject *stats = f->known ? PyList_GET_ITEM(f->entry, ENTRY_STATS) : f->stats;
    if (stats == NULL || !PyTuple_CheckExact(stats) || PyTuple_GET_SIZE(stats) != 2 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(stats, 0)))
        return NULL;
    return stats;
}

/* The tensor's key, version, shape and requires_grad into *f: 1, 0 where the Python path
 * describes it (not a plain tensor; an inference tensor, which keeps no version counter), -1
 * error. */
static int read_tensor(OpRecorder *self, Facts *f) {
    PyObject *t = f->tensor;
    if (!is_plain_tensor(self, t)) return 0;
    if ((f->key = PyLong_FromVoidPtr(t)) == NULL) return -1;
    PyObject *version = tensor_attribute(t, TENSOR_VERSION);
    f->version = version != NULL ? PyLong_AsLongLong(version) : -1;
    Py_XDECREF(version);
    if (f->version == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if ((f->shape = tensor_attribute(t, TENSOR_SHAPE)) == NULL) {
        /* no single shape (a strided nested tensor): described by the Python path
         * (capture/tensors/nested.py) */
        if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    PyObject *requires_grad = tensor_attribute(t, TENSOR_REQUIRES_GRAD);
    if (requires_grad == NULL) return -1;
    f->requires_grad = requires_grad == Py_True;
    Py_DECREF(requires_grad);
    return 1;
}

/* Whether this state's statistics are taken (every state at the full level; at the synaptic
 * level a wanted operand's, or a hook's tensor when wanted_positions is True itself,
 * record/hooks.c), f->written set for an argument the op writes: 1, 0, or -1 error. */
static int statistics_wanted(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
                             Py_ssize_t position) {
    long level = PyLong_AsLong(self->level);
    int take = level == LEVEL_FULL || (level == LEVEL_SYNAPTIC && position < 0 && wanted_positions == Py_True);
    f->written = 0;
    if (position >= 0) {
        PyObject *p = PyLong_FromSsize_t(position);
        if (p == NULL) return -1;
        f->written = PySet_Contains(written_positions, p);
        if (level == LEVEL_SYNAPTIC && f->written >= 0) take = PySet_Contains(wanted_positions, p);
        Py_DECREF(p);
        if (f->written < 0 || take < 0) return -1;
    }
    return take;
}

enum { STATE_PYTHON = 0, STATE_KNOWN = 1, STATE_NEW = 2 };

/* The registry's entry of the tensor, and whether its state now is the one the entry holds
 * (STATE_KNOWN, f->tensor_id its id) or a new one (STATE_NEW; where only requires_grad
 * changed, f->stats the statistics already taken); STATE_PYTHON for an entry of another
 * shape; -1 error. */
static int known_state(OpRecorder *self, Facts *f, int take) {
    f->entry = PyDict_GetItemWithError(self->entries, f->key);
    if (f->entry == NULL && PyErr_Occurred()) return -1;
    Py_XINCREF(f->entry);
    f->known = 0;
    if (f->entry == NULL) return STATE_NEW;
    if (!PyList_CheckExact(f->entry) || PyList_GET_SIZE(f->entry) != ENTRY_FIELDS) return STATE_PYTHON;
    PyObject **e = ((PyListObject *)f->entry)->ob_item;
    /* a state described without statistics, now wanted with them, is described again */
    int rescan = e[ENTRY_STATS] == self->skipped && take;
    if (f->written || rescan || !PyLong_CheckExact(e[ENTRY_VERSION]) ||
        PyLong_AsLongLong(e[ENTRY_VERSION]) != f->version)
        return STATE_NEW;
    int same_shape = PyObject_RichCompareBool(e[ENTRY_SHAPE], f->shape, Py_EQ);
    if (same_shape <= 0) return same_shape < 0 ? -1 : STATE_NEW;
    if (e[ENTRY_REQUIRES_GRAD] == (f->requires_grad ? Py_True : Py_False)) {
        f->known = 1;
        f->tensor_id = PyLong_AsLongLong(e[ENTRY_TENSOR_ID]);
        return PyErr_Occurred() ? -1 : STATE_KNOWN;
    }
    /* only requires_grad changed: a new row with the statistics already taken, or pending on the
     * device (a PendingStats: the registry's entries hold a 2-tuple or one of those) */
    if (PyTuple_CheckExact(e[ENTRY_STATS]) && PyTuple_GET_SIZE(e[ENTRY_STATS]) != 2) return STATE_PYTHON;
    f->stats = Py_NewRef(e[ENTRY_STATS]);
    return STATE_NEW;
}

/* Phase 1 for one distinct tensor: 1 ready, 0 leave the op to Python, -1 error. */
int tensor_facts(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
                 Py_ssize_t position, const Inheritance *inherit) {
    int ready = read_tensor(self, f);
    if (ready <= 0) return ready;
    int take = statistics_wanted(self, f, written_positions, wanted_positions, position);
    if (take < 0) return -1;
    int state = known_state(self, f, take);
    if (state != STATE_NEW) return state;
    if (f->stats == NULL && !take) f->stats = Py_NewRef(self->skipped); /* described, not scanned */
    int python_if_scanned = 0;
    if (f->stats == NULL && inherit != NULL) { /* an output to scan: what its rule gives instead */
        int64_t numel = shape_numel(f->shape);
        if (numel < 0 || inherited_stats(inherit, numel, &f->stats) < 0) return -1;
        python_if_scanned = f->stats == NULL && inherit->source_stats == NULL && inherit->to_python &&
                            numel >= PYTHON_RULE_FROM;
    }
    return new_state(self, f, python_if_scanned);
}

/* A new state's tensors row (registry.py ROW_COLUMNS): statistics pending on the device are
 * null until the flush fills them (registry.py resolve_pending). */
static int append_row(OpRecorder *self, Facts *f, long long tensor_id, long long uid, long long seq) {
    PyObject *a = self->row_appends;
    int pending = !PyTuple_CheckExact(f->stats);
    return append_long(a, ROW_TENSOR_ID, tensor_id) < 0 || append_long(a, ROW_UID, uid) < 0 ||
                   append_long(a, ROW_VERSION, f->version) < 0 || append_long(a, ROW_FIRST_SEQ, seq) < 0 ||
                   call_append(a, ROW_FORM, f->form) < 0 || append_long(a, ROW_STORAGE, f->storage) < 0 ||
                   append_or_null(a, ROW_NNZ, pending ? Py_None : PyTuple_GET_ITEM(f->stats, 0)) < 0 ||
                   append_or_null(a, ROW_IS01, pending ? Py_None : PyTuple_GET_ITEM(f->stats, 1)) < 0
               ? -1
               : 0;
}

/* After a row with statistics pending on the device: the registry takes them (DEFERRED) or
 * reuses the state's (a PendingStats) and notes the row for the flush; f->stats becomes what
 * the entry keeps. 0, or -1 with an exception set. */
static int pend_statistics(OpRecorder *self, Facts *f, long long seq) {
    PyObject *seq_object = PyLong_FromLongLong(seq);
    if (seq_object == NULL) return -1;
    PyObject *stats = PyObject_CallFunctionObjArgs(self->pend_row, f->tensor, seq_object,
                                                   f->stats == DEFERRED ? Py_None : f->stats, NULL);
    Py_DECREF(seq_object);
    if (stats == NULL) return -1;
    Py_SETREF(f->stats, stats);
    return 0;
}

/* A tensor's first registry entry, its weakref's callback the registry's _freed (ours, or
 * Python's): borrowed (the entries hold it), or NULL with an exception set. */
static PyObject *new_entry(OpRecorder *self, Facts *f, long long uid) {
    PyObject *ref = PyWeakref_NewRef(f->tensor, self->freed);
    if (ref == NULL) return NULL;
    PyObject *uid_object = PyLong_FromLongLong(uid);
    PyObject *value = uid_object ? PyTuple_Pack(2, f->key, uid_object) : NULL, *ref_id = PyLong_FromVoidPtr(ref);
    Py_XDECREF(uid_object);
    int r = value && ref_id ? PyDict_SetItem(self->refs, ref_id, value) : -1; /* by id: see registry.py _refs */
    Py_XDECREF(value);
    Py_XDECREF(ref_id);
    PyObject *entry = r < 0 ? NULL : PyList_New(ENTRY_FIELDS);
    PyObject *uid_item = entry ? PyLong_FromLongLong(uid) : NULL;
    if (uid_item == NULL) {
        Py_XDECREF(entry);
        Py_DECREF(ref);
        return NULL;
    }
    for (int i = 0; i < ENTRY_FIELDS; i++)
        PyList_SET_ITEM(entry, i, i == ENTRY_UID ? uid_item : Py_NewRef(i == ENTRY_REF ? ref : Py_None));
    Py_DECREF(ref);
    r = PyDict_SetItem(self->entries, f->key, entry);
    Py_DECREF(entry); /* the dict holds it */
    return r < 0 ? NULL : entry;
}

/* Phase 2 for one distinct tensor with a new state: its row, its entry. */
int write_state(OpRecorder *self, Facts *f, long long seq) {
    long long tensor_id = counter_take(self->tensor_ids), uid;
    if (tensor_id < 0) return -1;
    if (f->entry == NULL) {
        if ((uid = counter_take(self->uids)) < 0) return -1;
    } else {
        uid = PyLong_AsLongLong(PyList_GET_ITEM(f->entry, ENTRY_UID));
        if (uid == -1 && PyErr_Occurred()) return -1;
    }
    if (append_row(self, f, tensor_id, uid, seq) < 0) return -1;
    if (!PyTuple_CheckExact(f->stats) && pend_statistics(self, f, seq) < 0) return -1;
    PyObject *entry = f->entry != NULL ? f->entry : new_entry(self, f, uid);
    if (entry == NULL) return -1;
    /* an argument the op writes gets the version it will have once the op returned */
    long long version = f->written && f->version >= 0 ? f->version + 1 : f->version;
    PyObject *v = PyLong_FromLongLong(version), *id = PyLong_FromLongLong(tensor_id);
    if (v == NULL || id == NULL) {
        Py_XDECREF(v);
        Py_XDECREF(id);
        return -1;
    }
    PyList_SetItem(entry, ENTRY_VERSION, v);
    PyList_SetItem(entry, ENTRY_TENSOR_ID, id);
    PyList_SetItem(entry, ENTRY_SHAPE, Py_NewRef(f->shape));
    PyList_SetItem(entry, ENTRY_STATS, Py_NewRef(f->stats));
    PyList_SetItem(entry, ENTRY_REQUIRES_GRAD, Py_NewRef(f->requires_grad ? Py_True : Py_False));
    f->tensor_id = tensor_id;
    return 0;
}

/* The weakref callback of every described tensor (TensorRegistry._freed): its uid's
 * tensor_frees row, stamped with the next seq, and its registry entry gone. */
PyObject *OpRecorder_freed(OpRecorder *self, PyObject *ref) {
    PyObject *ref_id = PyLong_FromVoidPtr(ref);
    if (ref_id == NULL) return NULL;
    PyObject *found = PyDict_GetItemWithError(self->refs, ref_id);
    if (found == NULL) {
        Py_DECREF(ref_id);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(found);
    int removed = PyDict_DelItem(self->refs, ref_id);
    Py_DECREF(ref_id);
    if (removed < 0 || !PyTuple_CheckExact(found) || PyTuple_GET_SIZE(found) != 2) {
        Py_DECREF(found);
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "freed: a malformed registry entry");
        return NULL;
    }
    PyObject *key = PyTuple_GET_ITEM(found, 0), *uid = PyTuple_GET_ITEM(found, 1);
    PyObject *seq = uid == Py_None ? NULL : counter_value(self->seq_counter);
    int failed = uid == Py_None ? 0 : seq == NULL || call_append(self->free_appends, FREE_UID, uid) < 0 ||
                                          call_append(self->free_appends, FREE_SEQ, seq) < 0;
    Py_XDECREF(seq);
    if (!failed && uid != Py_None) {
        PyObject *entry = PyDict_GetItemWithError(self->entries, key);
        if (entry == NULL) {
            failed = PyErr_Occurred() != NULL;
        } else if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) > 0) {
            int same = PyObject_RichCompareBool(PyList_GET_ITEM(entry, ENTRY_UID), uid, Py_EQ);
            failed = same < 0 || (same && PyDict_DelItem(self->entries, key) < 0);
        }
    }
    Py_DECREF(found);
    if (failed) return NULL;
    Py_RETURN_NONE;
}
