/* capture._native.OpRecorder: the per-op record of capture/dispatch.py's OpLog.record, in C,
 * for the ops that make up nearly every step: positional arguments that are plain CPU
 * tensors, ints, None, finite floats or lists of ints, one plain CPU tensor out, value
 * statistics taken at once (at every level: every state, the synaptic operands, none), no
 * collective, no per-op scalars, no user's dispatch mode underneath.
 *
 * It writes exactly the rows the Python path writes (tests/test_fast_paths.py compares the
 * traces column by column), into the same buffers, with the same registry, interning
 * tables and counters: the two paths interleave freely. It checks everything it needs
 * before it changes anything; where a call is not of that kind it returns -1 having
 * changed nothing, and the Python path records the op. Everything the Python path gets
 * from torch it gets the same way (attribute and method calls on the tensor objects), so it
 * needs no torch headers; what it saves is the interpreter's work between those calls.
 *
 * An output whose statistics follow from its operands' (capture/propagation.py) is not
 * scanned either: a view, expand or clone takes its first operand's here; an op whose rule
 * runs in Python (x * 1, 1 - spikes, -x, ...) goes to the Python path when its output is
 * large enough that the scan it saves costs more than that path, and the rule can apply.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_native_rules.h"
#include <math.h>
#include <stddef.h>
#include <structmember.h>
#include <stdint.h>

/* capture/_native.c */
int native_scan_counts(uintptr_t address, int64_t element_size, uint64_t zero_mask, uint64_t one_bits,
                       int count_ones, int ndim, const int64_t *shape, const int64_t *strides, int64_t *nnz,
                       int64_t *ones);

#define MAX_TENSORS 32
#define MAX_ARGS 32
#define INTERNED_LIMIT 65536
#define ROW_KINDS_LIMIT 4096
#define FORMS_LIMIT 65536

typedef struct {
    PyObject_HEAD
    PyObject *context, *registry;
    PyObject *event_appends, *use_appends, *row_appends; /* tuples of bound append methods */
    PyObject *entries, *refs, *freed, *kinds, *make_kind, *row_kinds, *forms, *parameter_names;
    PyObject *interned_args, *placeholders_json, *arg_slots, *out_slot, *out_jsons;
    PyObject *interned_kwargs, *kwargs_json, *kwarg_types; /* keyword arguments without tensors */
    PyObject *tensor_marker, *float_marker, *ints_marker, *skipped;
    PyObject *calls, *tensor_type, *parameter_type, *strided, *bit_formats;
    PyObject *is_grad_enabled, *graph_task_id, *in_recomputation, *dispatch_depth;
    PyObject *thread_index, *scope_id, *storage_pointer;
    PyObject *level; /* 2 full (every state), 1 synaptic (wanted operands only), 0 none */
    PyObject *free_appends, *snapshot_memories, *event_seqs, *maybe_flush, *flush_rows;
    PyObject *context_key, *context_tuple;
    long long recorded; /* events this object recorded (the rest went to the Python path) */
    unsigned long thread_ident;           /* the thread whose index is cached */
    PyObject *thread_value;               /* its index */
    PyObject *scope_generation, *scope_value; /* the tracker generation whose scope id is cached */
} OpRecorder;

static PyObject *s_version, *s_shape, *s_requires_grad, *s_dtype, *s_device, *s_layout, *s_is_meta, *s_is_neg,
    *s_is_cpu, *s_storage_offset, *s_stride, *s_data_ptr, *s_seq, *s_steps_recorded, *s_step_index,
    *s_current_record, *s_current_stage, *s_next_tensor_id, *s_next_uid, *s_stage_id, *s_name, *s_phase,
    *s_unlabeled, *s_empty_kwargs, *s_written_positions, *s_generation, *s_tracker, *s_stateful_generation, *s_active_stateful,
    *s_memory_snapshots, *s_memories;

/* What phase 1 learnt about one distinct tensor of the call. */
typedef struct {
    PyObject *tensor;       /* borrowed */
    PyObject *key;          /* id(tensor), new reference */
    PyObject *entry;        /* new reference (a large scan releases the GIL), or NULL */
    PyObject *shape;        /* new reference */
    PyObject *stats;        /* new reference: (nnz, is01) of a new state, NULL for a known one */
    PyObject *form;         /* new reference, new states only */
    long long version, storage;
    int requires_grad, written, known, same_as; /* same_as: index of an earlier equal tensor, or -1 */
    long long tensor_id;
} Facts;

static void clear_facts(Facts *f, int n) {
    for (int i = 0; i < n; i++) {
        Py_XDECREF(f[i].key);
        Py_XDECREF(f[i].shape);
        Py_XDECREF(f[i].stats);
        Py_XDECREF(f[i].form);
        Py_XDECREF(f[i].entry);
    }
}

static int call_append(PyObject *appends, Py_ssize_t i, PyObject *value) {
    PyObject *append = PyTuple_GET_ITEM(appends, i);
    /* A list's or an array's own append (a METH_O builtin) is called directly: most of a
     * call through the generic machinery is the machinery. */
    PyObject *r = PyCFunction_Check(append) && PyCFunction_GET_FLAGS(append) == METH_O
                      ? PyCFunction_GET_FUNCTION(append)(PyCFunction_GET_SELF(append), value)
                      : PyObject_CallOneArg(append, value);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

static int append_long(PyObject *appends, Py_ssize_t i, long long value) {
    PyObject *v = PyLong_FromLongLong(value);
    if (v == NULL) return -1;
    int r = call_append(appends, i, v);
    Py_DECREF(v);
    return r;
}

/* null is -1 in the nnz and is01 columns (capture/table_buffer.py NULL_SENTINELS) */
static int append_or_null(PyObject *appends, Py_ssize_t i, PyObject *value) {
    return value == Py_None ? append_long(appends, i, -1) : call_append(appends, i, value);
}

static long long long_attr(PyObject *o, PyObject *name, int *failed) {
    PyObject *v = PyObject_GetAttr(o, name);
    if (v == NULL) {
        *failed = 1;
        return -1;
    }
    long long r = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (r == -1 && PyErr_Occurred()) *failed = 1;
    return r;
}

/* The interning key of one positional argument, a new reference; NULL with no error set
 * when the argument is of a kind this path leaves to Python. */
static PyObject *argument_key(OpRecorder *self, PyObject *a) {
    if (a == Py_None || PyLong_CheckExact(a)) return Py_NewRef(a);
    if (PyFloat_CheckExact(a)) {
        double v = PyFloat_AS_DOUBLE(a);
        if (!isfinite(v)) return NULL;
        return Py_BuildValue("(OOd)", self->float_marker, a, copysign(1.0, v));
    }
    if (PyList_CheckExact(a) || PyTuple_CheckExact(a)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(a);
        PyObject **items = PySequence_Fast_ITEMS(a);
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
 * kwargs_key (capture/arguments.py kwargs_json encodes a key's first call, as the Python path
 * does). NULL with no error set where the Python path must record the op. */
static PyObject *keyword_json(OpRecorder *self, PyObject *kwargs) {
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
    return Py_BuildValue("(LO)", (long long)nnz, ones == nnz ? Py_True : Py_False);
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
    int64_t numel = 1;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(f->shape); d++) numel *= PyLong_AsLongLong(PyTuple_GET_ITEM(f->shape, d));
    if (PyErr_Occurred()) return -1;
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

static int is_plain_tensor(OpRecorder *self, PyObject *a) {
    return Py_TYPE(a) == (PyTypeObject *)self->tensor_type || Py_TYPE(a) == (PyTypeObject *)self->parameter_type;
}

/* The context tuple of this event (capture/dispatch.py's $context), a new reference. */
static PyObject *event_context(OpRecorder *self) {
    PyObject *stage = NULL, *step = NULL, *grad = NULL, *task = NULL, *recompute = NULL, *thread = NULL,
             *scope = NULL, *key = NULL, *result = NULL;
    stage = PyObject_GetAttr(self->context, s_current_stage);
    if (stage == NULL) goto done;
    step = PyObject_GetAttr(self->context, s_step_index);
    if (step == NULL) goto done;
    grad = PyObject_CallNoArgs(self->is_grad_enabled);
    if (grad == NULL) goto done;
    task = PyObject_CallNoArgs(self->graph_task_id);
    if (task == NULL) goto done;
    long long task_id = PyLong_AsLongLong(task);
    if (task_id == -1 && PyErr_Occurred()) goto done;
    PyObject *in_backward = task_id != -1 ? Py_True : Py_False;
    if (task_id != -1) {
        recompute = PyObject_CallOneArg(self->in_recomputation, grad);
        if (recompute == NULL) goto done;
    } else {
        recompute = Py_NewRef(Py_False);
    }
    /* The context's thread_index() and scope_id(), called only when what they depend on
     * changed: the calling thread, the tracker's generation. */
    unsigned long ident = PyThread_get_thread_ident();
    if (self->thread_value == NULL || ident != self->thread_ident) {
        PyObject *index = PyObject_CallNoArgs(self->thread_index);
        if (index == NULL) goto done;
        Py_XSETREF(self->thread_value, index);
        self->thread_ident = ident;
    }
    thread = Py_NewRef(self->thread_value);
    PyObject *tracker = PyObject_GetAttr(self->context, s_tracker);
    PyObject *generation = tracker ? PyObject_GetAttr(tracker, s_generation) : NULL;
    Py_XDECREF(tracker);
    if (generation == NULL) goto done;
    int same_scope = self->scope_generation != NULL && generation == self->scope_generation;
    if (!same_scope && self->scope_generation != NULL) {
        same_scope = PyObject_RichCompareBool(generation, self->scope_generation, Py_EQ);
        if (same_scope < 0) {
            Py_DECREF(generation);
            goto done;
        }
    }
    if (!same_scope) {
        PyObject *value = PyObject_CallNoArgs(self->scope_id);
        if (value == NULL) {
            Py_DECREF(generation);
            goto done;
        }
        Py_XSETREF(self->scope_value, value);
        Py_XSETREF(self->scope_generation, generation);
    } else {
        Py_DECREF(generation);
    }
    scope = Py_NewRef(self->scope_value);
    key = PyTuple_Pack(7, stage, step, grad, in_backward, thread, scope, recompute);
    if (key == NULL) goto done;
    int same = self->context_key != NULL ? PyObject_RichCompareBool(key, self->context_key, Py_EQ) : 0;
    if (same < 0) goto done;
    if (!same) {
        PyObject *tuple;
        if (stage == Py_None) {
            tuple = PyTuple_Pack(9, step, Py_None, s_unlabeled, Py_None, grad, in_backward, thread, scope, recompute);
        } else {
            PyObject *stage_id = PyObject_GetAttr(stage, s_stage_id);
            PyObject *name = stage_id ? PyObject_GetAttr(stage, s_name) : NULL;
            PyObject *phase = name ? PyObject_GetAttr(stage, s_phase) : NULL;
            tuple = phase ? PyTuple_Pack(9, step, stage_id, name, phase, grad, in_backward, thread, scope, recompute)
                          : NULL;
            Py_XDECREF(stage_id);
            Py_XDECREF(name);
            Py_XDECREF(phase);
        }
        if (tuple == NULL) goto done;
        Py_XSETREF(self->context_tuple, tuple);
        Py_XSETREF(self->context_key, Py_NewRef(key));
    }
    result = Py_NewRef(self->context_tuple);
done:
    Py_XDECREF(key);
    Py_XDECREF(scope);
    Py_XDECREF(thread);
    Py_XDECREF(recompute);
    Py_XDECREF(task);
    Py_XDECREF(grad);
    Py_XDECREF(step);
    Py_XDECREF(stage);
    return result;
}

/* How an op with a propagation rule is met: the PROPAGATE_ enum of capture/_native_rules.h. */
/* Output elements from which an op whose rule runs in Python is sent there: its scan would
 * cost more than the Python path does (a scan of 2**17 float32s ~25 us, the Python path ~30). */
#define PYTHON_RULE_FROM ((int64_t)1 << 17)

/* What the output may take from its operands instead of a scan: the first operand's
 * statistics and element count (PROPAGATE_SAME), or `to_python` (the Python rule may apply). */
typedef struct {
    PyObject *source_stats; /* borrowed (nnz, is01), or NULL */
    int64_t source_numel;
    int to_python;
} Inheritance;

static int64_t shape_numel(PyObject *shape) {
    int64_t numel = 1;
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(shape); d++) numel *= PyLong_AsLongLong(PyTuple_GET_ITEM(shape, d));
    return PyErr_Occurred() ? -1 : numel;
}

/* The (nnz, is01) a fact's state has, or will have once written: borrowed; NULL where not
 * known (statistics skipped or null), as TensorRegistry.stats_of says for the Python path. */
static PyObject *fact_stats(Facts *facts, int k) {
    Facts *f = facts[k].same_as >= 0 ? &facts[facts[k].same_as] : &facts[k];
    PyObject *stats = f->known ? PyList_GET_ITEM(f->entry, 5) : f->stats;
    if (stats == NULL || !PyTuple_CheckExact(stats) || PyTuple_GET_SIZE(stats) != 2 ||
        !PyLong_CheckExact(PyTuple_GET_ITEM(stats, 0)))
        return NULL;
    return stats;
}

/* Phase 1 for one distinct tensor: 1 ready, 0 leave the op to Python, -1 error. */
static int tensor_facts(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
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
                if (numel == 0) f->stats = Py_BuildValue("(LO)", 0LL, Py_True);
            } else {
                long long base = PyLong_AsLongLong(nnz);
                if (base == -1 && PyErr_Occurred()) return -1;
                f->stats = Py_BuildValue("(LO)", base * (numel / inherit->source_numel), is01);
            }
            if (f->stats == NULL && PyErr_Occurred()) return -1;
        } else if (inherit->to_python && numel >= PYTHON_RULE_FROM) {
            return 0;
        }
    }
    return new_state(self, f);
}

/* Phase 2 for one distinct tensor with a new state: its row, its entry. */
static int write_state(OpRecorder *self, Facts *f, long long seq) {
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
        PyObject *value = Py_BuildValue("(OL)", f->key, uid), *ref_id = PyLong_FromVoidPtr(ref);
        int r = value && ref_id ? PyDict_SetItem(self->refs, ref_id, value) : -1; /* by id: see tensors.py _refs */
        Py_XDECREF(value);
        Py_XDECREF(ref_id);
        if (r < 0) {
            Py_DECREF(ref);
            return -1;
        }
        entry = Py_BuildValue("[LOOOOOO]", uid, Py_None, Py_None, Py_None, ref, Py_None, Py_None);
        Py_DECREF(ref);
        if (entry == NULL) return -1;
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

/* Whether every active neuron's memories are the very objects its last snapshot holds, as
 * RecordingContext.snapshot_memories compares them (1; 0 where one changed or is not a plain
 * dict and tuple, which Python then looks at; -1 error). */
static int memories_unchanged(OpRecorder *self, PyObject *active) {
    PyObject *snapshots = PyObject_GetAttr(self->context, s_memory_snapshots);
    if (snapshots == NULL) return -1;
    int unchanged = PyDict_CheckExact(snapshots);
    for (Py_ssize_t i = 0; unchanged > 0 && i < PyList_GET_SIZE(active); i++) {
        PyObject *item = PyList_GET_ITEM(active, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2) {
            unchanged = 0;
            break;
        }
        PyObject *previous = PyDict_GetItemWithError(snapshots, PyTuple_GET_ITEM(item, 0)); /* borrowed */
        PyObject *memories = previous ? PyObject_GetAttr(PyTuple_GET_ITEM(item, 1), s_memories) : NULL;
        if (memories == NULL) {
            unchanged = PyErr_Occurred() ? -1 : 0;
            break;
        }
        unchanged = PyDict_CheckExact(memories) && PyTuple_CheckExact(previous) &&
                    PyTuple_GET_SIZE(previous) == PyDict_GET_SIZE(memories);
        Py_ssize_t position = 0, k = 0;
        PyObject *name, *value;
        while (unchanged && PyDict_Next(memories, &position, &name, &value))
            unchanged = value == PyTuple_GET_ITEM(previous, k++);
        Py_DECREF(memories);
    }
    Py_DECREF(snapshots);
    return unchanged;
}

/* What OpLog.record does after an event: neuron memory snapshots while a stateful neuron is
 * active (RecordingContext.snapshot_memories, called only when it has anything to look at),
 * and the writer's flush check. */
static int after_event(OpRecorder *self, long long seq) {
    PyObject *active = PyObject_GetAttr(self->context, s_active_stateful);
    if (active == NULL) return -1;
    PyObject *tracker = PyObject_GetAttr(self->context, s_tracker); /* built after this object */
    PyObject *generation = tracker ? PyObject_GetAttr(tracker, s_generation) : NULL;
    Py_XDECREF(tracker);
    PyObject *seen = generation ? PyObject_GetAttr(self->context, s_stateful_generation) : NULL;
    int look = seen ? PyObject_RichCompareBool(generation, seen, Py_NE) : -1; /* active modules changed */
    Py_XDECREF(seen);
    Py_XDECREF(generation);
    if (look == 0 && (!PyList_CheckExact(active) || PyList_GET_SIZE(active) > 0)) {
        int unchanged = PyList_CheckExact(active) ? memories_unchanged(self, active) : 0;
        look = unchanged < 0 ? -1 : !unchanged;
    }
    Py_DECREF(active);
    if (look < 0) return -1;
    if (look) {
        PyObject *r = PyObject_CallFunction(self->snapshot_memories, "L", seq);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    Py_ssize_t rows = PyObject_Length(self->event_seqs);
    if (rows < 0) return -1;
    long long flush_rows = PyLong_AsLongLong(self->flush_rows);
    if (flush_rows == -1 && PyErr_Occurred()) return -1;
    if (rows % 4096 == 0 || rows >= flush_rows) {
        PyObject *r = PyObject_CallNoArgs(self->maybe_flush);
        if (r == NULL) return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* The weakref callback of every described tensor (TensorRegistry._freed): its uid's
 * tensor_frees row, stamped with the next seq, and its registry entry gone. */
static PyObject *OpRecorder_freed(OpRecorder *self, PyObject *ref) {
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
    PyObject *seq = uid == Py_None ? NULL : PyObject_GetAttr(self->context, s_seq);
    int failed = uid == Py_None ? 0 : seq == NULL || call_append(self->free_appends, 0, uid) < 0 ||
                                          call_append(self->free_appends, 1, seq) < 0;
    Py_XDECREF(seq);
    if (!failed && uid != Py_None) {
        PyObject *entry = PyDict_GetItemWithError(self->entries, key);
        if (entry == NULL) {
            failed = PyErr_Occurred() != NULL;
        } else if (PyList_CheckExact(entry) && PyList_GET_SIZE(entry) > 0) {
            int same = PyObject_RichCompareBool(PyList_GET_ITEM(entry, 0), uid, Py_EQ);
            failed = same < 0 || (same && PyDict_DelItem(self->entries, key) < 0);
        }
    }
    Py_DECREF(found);
    if (failed) return NULL;
    Py_RETURN_NONE;
}

/* record(name, written_positions, wanted_positions, propagation, args, kwargs, out) -> seq, or -1
 * when the Python path must record the op (`propagation`: the enum above, OpPlan.native_propagation). */
static PyObject *OpRecorder_record(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "record(name, written_positions, wanted_positions, propagation, args, kwargs, out)");
        return NULL;
    }
    PyObject *name = argv[0], *written_positions = argv[1], *wanted_positions = argv[2], *args = argv[4],
             *out = argv[6];
    long propagation = PyLong_AsLong(argv[3]);
    if (propagation == -1 && PyErr_Occurred()) return NULL;
    PyObject *key = NULL, *context = NULL, *call = NULL, *result = NULL, *kwargs_json = NULL;
    Facts facts[MAX_TENSORS];
    PyObject *slots[MAX_TENSORS];
    int n_tensors = 0, n_facts = 0;
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) > MAX_ARGS || !is_plain_tensor(self, out))
        return PyLong_FromLong(-1);
    PyObject *depth = PyObject_CallNoArgs(self->dispatch_depth);
    if (depth == NULL) return NULL;
    long modes = PyLong_AsLong(depth);
    Py_DECREF(depth);
    if (modes != 0) return PyErr_Occurred() ? NULL : PyLong_FromLong(-1); /* a user's mode: guarded path */
    kwargs_json = keyword_json(self, argv[5]); /* a new reference: the table may be cleared meanwhile */
    if (kwargs_json == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(-1);
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    key = PyTuple_New(n);
    if (key == NULL) return NULL;
    Py_ssize_t positions[MAX_TENSORS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        PyObject *item;
        if (is_plain_tensor(self, a)) {
            if (n_tensors >= MAX_TENSORS - 1) goto python;
            positions[n_tensors] = i;
            slots[n_tensors] = PyTuple_GET_ITEM(self->arg_slots, i);
            facts[n_tensors++].tensor = a;
            item = Py_NewRef(self->tensor_marker);
        } else {
            item = argument_key(self, a);
            if (item == NULL) {
                if (PyErr_Occurred()) goto done;
                goto python;
            }
        }
        PyTuple_SET_ITEM(key, i, item);
    }
    positions[n_tensors] = -1;
    slots[n_tensors] = self->out_slot;
    facts[n_tensors++].tensor = out;
    for (int k = 0; k < n_tensors; k++) {
        facts[k].key = facts[k].shape = facts[k].stats = facts[k].form = NULL;
        facts[k].entry = NULL;
        facts[k].same_as = -1;
    }
    n_facts = n_tensors;
    /* Phase 1: everything that can fail or send the op to Python; nothing changes yet. */
    for (int k = 0; k < n_tensors; k++) {
        for (int j = 0; j < k; j++)
            if (facts[j].tensor == facts[k].tensor) {
                facts[k].same_as = j;
                break;
            }
        if (facts[k].same_as >= 0) continue;
        Inheritance inherit = {NULL, 0, 0}, *inheriting = NULL;
        PyObject *derived = NULL; /* statistics a rule computed here, owned */
        if (k == n_tensors - 1 && propagation != PROPAGATE_NONE) { /* the output, its operands read */
            inheriting = &inherit;
            if (propagation == PROPAGATE_SAME) {
                if (n_tensors > 1 && positions[0] == 0 && (inherit.source_stats = fact_stats(facts, 0)) != NULL) {
                    Facts *source = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    if ((inherit.source_numel = shape_numel(source->shape)) < 0) goto done;
                }
            } else if (propagation == PROPAGATE_PYTHON) {
                inherit.to_python = 1;
            } else if (propagation == PROPAGATE_BINARY_CAST || propagation == PROPAGATE_NEGATE) {
                PyObject *source = n_tensors > 1 && positions[0] == 0 ? fact_stats(facts, 0) : NULL;
                if (source != NULL && (propagation == PROPAGATE_NEGATE || PyTuple_GET_ITEM(source, 1) == Py_True)) {
                    Facts *operand = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    if ((inherit.source_numel = shape_numel(operand->shape)) < 0) goto done;
                    if (propagation == PROPAGATE_NEGATE) {
                        long long nnz = PyLong_AsLongLong(PyTuple_GET_ITEM(source, 0));
                        if (nnz == -1 && PyErr_Occurred()) goto done;
                        if ((derived = Py_BuildValue("(LO)", nnz, nnz == 0 ? Py_True : Py_False)) == NULL) goto done;
                        source = derived;
                    }
                    inherit.source_stats = source;
                }
            } else { /* arithmetic and 1 - x: capture/_native_rules.c */
                Operand x_operand, other_operand, out_operand;
                const Operand *x = NULL, *other = NULL;
                if (n_tensors > 1 && positions[0] == 0) {
                    Facts *f = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    x_operand = (Operand){facts[0].tensor, fact_stats(facts, 0), f->shape};
                    x = &x_operand;
                }
                if (n_tensors > 2 && positions[1] == 1) {
                    Facts *f = facts[1].same_as >= 0 ? &facts[facts[1].same_as] : &facts[1];
                    other_operand = (Operand){facts[1].tensor, fact_stats(facts, 1), f->shape};
                    other = &other_operand;
                }
                out_operand = (Operand){out, NULL, PyObject_GetAttr(out, s_shape)};
                if (out_operand.shape == NULL) goto done;
                int rule = arithmetic_rule((int)propagation, args, argv[5], x, other, &out_operand, &derived);
                if (rule == RULE_APPLIES) {
                    inherit.source_stats = derived;
                    inherit.source_numel = shape_numel(out_operand.shape);
                }
                Py_DECREF(out_operand.shape);
                if (rule < 0 || inherit.source_numel < 0) {
                    Py_XDECREF(derived);
                    goto done;
                }
                inherit.to_python = rule == RULE_UNSURE; /* the Python rule decides, for a large output */
            }
        }
        int ready = tensor_facts(self, &facts[k], written_positions, wanted_positions, positions[k], inheriting);
        Py_XDECREF(derived); /* tensor_facts took its own reference where it kept them */
        if (ready < 0) goto done;
        if (ready == 0) goto python;
    }
    context = event_context(self);
    if (context == NULL) goto done;
    PyObject *args_json = PyDict_GetItemWithError(self->interned_args, key);
    if (args_json == NULL) {
        if (PyErr_Occurred()) goto done;
        if (PyDict_GET_SIZE(self->interned_args) > INTERNED_LIMIT) PyDict_Clear(self->interned_args);
        args_json = PyObject_CallOneArg(self->placeholders_json, key);
        if (args_json == NULL || PyDict_SetItem(self->interned_args, key, args_json) < 0) {
            Py_XDECREF(args_json);
            goto done;
        }
        Py_DECREF(args_json); /* the dict holds it */
    }
    if (n_tensors - 1 >= PyTuple_GET_SIZE(self->out_jsons)) goto python;
    call = PyTuple_Pack(4, name, args_json, kwargs_json, PyTuple_GET_ITEM(self->out_jsons, n_tensors - 1));
    if (call == NULL) goto done;
    if (PyDict_GET_SIZE(self->calls) > INTERNED_LIMIT) PyDict_Clear(self->calls);
    PyObject *interned_call = PyDict_SetDefault(self->calls, call, call);
    if (interned_call == NULL) goto done;
    Py_SETREF(call, Py_NewRef(interned_call));

    /* Phase 2: the rows. */
    int failed = 0;
    long long seq = long_attr(self->context, s_seq, &failed);
    if (failed) goto done;
    PyObject *next_seq = PyLong_FromLongLong(seq + 1);
    if (next_seq == NULL || PyObject_SetAttr(self->context, s_seq, next_seq) < 0) {
        Py_XDECREF(next_seq);
        goto done;
    }
    Py_DECREF(next_seq);
    PyObject *steps = PyObject_GetAttr(self->context, s_steps_recorded);
    PyObject *step = steps ? PyObject_GetAttr(self->context, s_step_index) : NULL;
    int added = step ? PySet_Add(steps, step) : -1;
    Py_XDECREF(step);
    Py_XDECREF(steps);
    if (added < 0 || PyObject_SetAttr(self->context, s_current_record, name) < 0) goto done;
    for (int k = 0; k < n_tensors; k++) {
        Facts *f = &facts[k];
        if (f->same_as >= 0) {
            f->tensor_id = facts[f->same_as].tensor_id;
        } else if (!f->known && write_state(self, f, seq) < 0) {
            goto done;
        }
    }
    for (int k = 0; k < n_tensors; k++) {
        if (append_long(self->use_appends, 0, seq) < 0 || append_long(self->use_appends, 1, k) < 0 ||
            call_append(self->use_appends, 2, slots[k]) < 0 || append_long(self->use_appends, 3, facts[k].tensor_id) < 0)
            goto done;
    }
    if (append_long(self->event_appends, 0, seq) < 0 || call_append(self->event_appends, 1, call) < 0 ||
        call_append(self->event_appends, 2, context) < 0)
        goto done;
    self->recorded++;
    if (after_event(self, seq) < 0) goto done;
    result = PyLong_FromLongLong(seq);
    goto done;
python:
    result = PyLong_FromLong(-1);
done:
    clear_facts(facts, n_facts);
    Py_XDECREF(kwargs_json);
    Py_XDECREF(call);
    Py_XDECREF(context);
    Py_XDECREF(key);
    return result;
}

/* -- the type ------------------------------------------------------------------------------ */

#define FIELD(name) {#name, offsetof(OpRecorder, name)}
static const struct {
    const char *name;
    size_t offset;
} FIELDS[] = {
    FIELD(context), FIELD(registry), FIELD(event_appends), FIELD(use_appends), FIELD(row_appends), FIELD(entries),
    FIELD(refs), FIELD(freed), FIELD(kinds), FIELD(make_kind), FIELD(row_kinds), FIELD(forms),
    FIELD(parameter_names), FIELD(interned_args), FIELD(placeholders_json), FIELD(arg_slots), FIELD(out_slot),
    FIELD(out_jsons), FIELD(tensor_marker), FIELD(float_marker), FIELD(ints_marker), FIELD(skipped), FIELD(calls),
    FIELD(tensor_type), FIELD(parameter_type), FIELD(strided), FIELD(bit_formats), FIELD(is_grad_enabled),
    FIELD(graph_task_id), FIELD(in_recomputation), FIELD(dispatch_depth), FIELD(thread_index), FIELD(scope_id),
    FIELD(storage_pointer), FIELD(level), FIELD(free_appends), FIELD(snapshot_memories), FIELD(event_seqs),
    FIELD(maybe_flush), FIELD(flush_rows), FIELD(interned_kwargs), FIELD(kwargs_json), FIELD(kwarg_types),
};
#define N_FIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))
#define SLOT(self, i) ((PyObject **)((char *)(self) + FIELDS[i].offset))

static int OpRecorder_init(OpRecorder *self, PyObject *args, PyObject *kwargs) {
    if (PyTuple_GET_SIZE(args) != 0 || kwargs == NULL || PyDict_GET_SIZE(kwargs) != (Py_ssize_t)N_FIELDS) {
        PyErr_Format(PyExc_TypeError, "OpRecorder takes its %d fields as keyword arguments", (int)N_FIELDS);
        return -1;
    }
    for (size_t i = 0; i < N_FIELDS; i++) {
        PyObject *value = PyDict_GetItemString(kwargs, FIELDS[i].name);
        if (value == NULL) {
            PyErr_Format(PyExc_TypeError, "OpRecorder: missing field %s", FIELDS[i].name);
            return -1;
        }
        Py_XSETREF(*SLOT(self, i), Py_NewRef(value));
    }
    if (self->freed == Py_None) { /* the weakref callback: this object's own freed() */
        PyObject *own = PyObject_GetAttrString((PyObject *)self, "freed");
        if (own == NULL) return -1;
        Py_SETREF(self->freed, own);
    }
    const char *tuples[] = {"event_appends", "use_appends", "row_appends", "arg_slots", "out_jsons", "free_appends",
                            "kwarg_types"};
    PyObject *checks[] = {self->event_appends, self->use_appends, self->row_appends, self->arg_slots, self->out_jsons,
                          self->free_appends, self->kwarg_types};
    Py_ssize_t sizes[] = {3, 4, 8, MAX_ARGS, -1, 2, -1};
    for (int i = 0; i < 7; i++) {
        if (!PyTuple_CheckExact(checks[i]) || (sizes[i] >= 0 && PyTuple_GET_SIZE(checks[i]) != sizes[i])) {
            PyErr_Format(PyExc_TypeError, "OpRecorder: %s must be a tuple of %zd", tuples[i], sizes[i]);
            return -1;
        }
    }
    PyObject *dicts[] = {self->entries, self->refs, self->kinds, self->row_kinds, self->forms, self->parameter_names,
                         self->interned_args, self->calls, self->bit_formats, self->interned_kwargs};
    for (int i = 0; i < 10; i++) {
        if (!PyDict_CheckExact(dicts[i])) {
            PyErr_SetString(PyExc_TypeError, "OpRecorder: its tables must be dicts");
            return -1;
        }
    }
    return 0;
}

static int OpRecorder_traverse(OpRecorder *self, visitproc visit, void *arg) {
    for (size_t i = 0; i < N_FIELDS; i++) Py_VISIT(*SLOT(self, i));
    Py_VISIT(self->context_key);
    Py_VISIT(self->context_tuple);
    Py_VISIT(self->thread_value);
    Py_VISIT(self->scope_generation);
    Py_VISIT(self->scope_value);
    return 0;
}

static int OpRecorder_clear(OpRecorder *self) {
    for (size_t i = 0; i < N_FIELDS; i++) Py_CLEAR(*SLOT(self, i));
    Py_CLEAR(self->context_key);
    Py_CLEAR(self->context_tuple);
    Py_CLEAR(self->thread_value);
    Py_CLEAR(self->scope_generation);
    Py_CLEAR(self->scope_value);
    return 0;
}

static void OpRecorder_dealloc(OpRecorder *self) {
    PyObject_GC_UnTrack(self);
    OpRecorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef OpRecorder_methods[] = {
    {"freed", (PyCFunction)OpRecorder_freed, METH_O,
     "freed(ref): the weakref callback of a described tensor (TensorRegistry._freed)"},
    {"record", (PyCFunction)(void (*)(void))OpRecorder_record, METH_FASTCALL,
     "record(name, written_positions, wanted_positions, args, out) -> the event's seq, or -1 where the Python "
     "path records the op"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef OpRecorder_members[] = {
    {"recorded", T_LONGLONG, offsetof(OpRecorder, recorded), READONLY, "events recorded by the compiled path"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject OpRecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "capture._native.OpRecorder",
    .tp_basicsize = sizeof(OpRecorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The per-op record of capture/dispatch.py's OpLog for the common call, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)OpRecorder_init,
    .tp_traverse = (traverseproc)OpRecorder_traverse,
    .tp_clear = (inquiry)OpRecorder_clear,
    .tp_dealloc = (destructor)OpRecorder_dealloc,
    .tp_methods = OpRecorder_methods,
    .tp_members = OpRecorder_members,
};

int native_add_record_type(PyObject *module) {
    struct {
        PyObject **target;
        const char *text;
    } strings[] = {
        {&s_version, "_version"}, {&s_shape, "shape"}, {&s_requires_grad, "requires_grad"}, {&s_dtype, "dtype"},
        {&s_device, "device"}, {&s_layout, "layout"}, {&s_is_meta, "is_meta"}, {&s_is_neg, "is_neg"},
        {&s_is_cpu, "is_cpu"}, {&s_storage_offset, "storage_offset"}, {&s_stride, "stride"},
        {&s_data_ptr, "data_ptr"}, {&s_seq, "seq"}, {&s_steps_recorded, "steps_recorded"},
        {&s_step_index, "step_index"}, {&s_current_record, "current_record"}, {&s_current_stage, "current_stage"},
        {&s_next_tensor_id, "next_tensor_id"}, {&s_next_uid, "next_uid"}, {&s_stage_id, "stage_id"},
        {&s_name, "name"}, {&s_phase, "phase"}, {&s_unlabeled, "unlabeled"}, {&s_empty_kwargs, "{}"},
        {&s_written_positions, "written_positions"}, {&s_generation, "generation"}, {&s_tracker, "tracker"},
        {&s_stateful_generation, "_stateful_generation"}, {&s_active_stateful, "_active_stateful"},
        {&s_memory_snapshots, "_memory_snapshots"}, {&s_memories, "_memories"},
    };
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        *strings[i].target = PyUnicode_InternFromString(strings[i].text);
        if (*strings[i].target == NULL) return -1;
    }
    if (PyType_Ready(&OpRecorderType) < 0) return -1;
    Py_INCREF(&OpRecorderType);
    if (PyModule_AddObject(module, "OpRecorder", (PyObject *)&OpRecorderType) < 0) {
        Py_DECREF(&OpRecorderType);
        return -1;
    }
    return 0;
}
