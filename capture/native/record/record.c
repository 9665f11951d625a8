/* OpRecorder.record: the per-op record of capture/ops/dispatch.py's OpLog.record_in_python, in
 * C, for the ops that make up nearly every step: positional arguments that are plain CPU
 * tensors, ints, None, finite floats, lists of ints or bools, one plain CPU tensor out or a
 * tuple or list of them and Nones (convolution_backward, batch norm, unbind), value
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
 * An output whose statistics follow from its operands' (capture/tensors/propagation.py) is not
 * scanned either: views, expand, clone, casts of 0/1 tensors, negation, 1 - spikes and the
 * arithmetic identities (x * 1, x + 0, an all-zero operand, spikes * 0) are applied here
 * (record/inherit.c, record/rules.c); a rule this code does not apply goes to the Python path
 * when the output is large enough that the scan it saves costs more than that path.
 *
 * This file: the record's two phases. The parts of an event are in record/call.c and
 * record/context.c, the tensor states in record/state.c and record/forms.c, what follows an
 * event in record/snapshots.c.
 */
#include "record/record.h"

/* A call's tensors, in the order of their event_tensors rows: the positional arguments' (an
 * argument, or each item of a tensor list argument), then the outputs'. */
typedef struct {
    Facts facts[MAX_TENSORS];
    PyObject *slots[MAX_TENSORS];        /* borrowed: each row's interned $slot */
    Py_ssize_t positions[MAX_TENSORS];   /* its positional argument, -1 for an output */
    int listed[MAX_TENSORS];             /* an item of a tensor list argument (cat, stack) */
    int n;
    long long out_key;                   /* a tuple or list out's key (interface.h), else 0 */
} CallTensors;

static void add_tensor(CallTensors *c, PyObject *t, Py_ssize_t position, int listed, PyObject *slot) {
    Facts *f = &c->facts[c->n];
    *f = (Facts){.tensor = t, .same_as = -1};
    c->positions[c->n] = position;
    c->listed[c->n] = listed;
    c->slots[c->n++] = slot;
}

/* The items of a tuple or list out of plain tensors and Nones, 0 for one plain tensor out, or
 * -1 where the Python path records the op. */
static Py_ssize_t out_items_of(OpRecorder *self, PyObject *out) {
    if (is_plain_tensor(self, out)) return 0;
    if (!PyTuple_CheckExact(out) && !PyList_CheckExact(out)) return -1;
    Py_ssize_t items = PySequence_Fast_GET_SIZE(out);
    if (items == 0 || items > MAX_TENSORS - 1) return -1;
    for (Py_ssize_t i = 0; i < items; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(out, i);
        if (item != Py_None && !is_plain_tensor(self, item)) return -1;
    }
    return items;
}

/* The interning key of the positional arguments (arguments.py encode_call's), their tensors
 * added to `c`: a new reference, or NULL (with an error set, or none where the Python path
 * records the op). */
static PyObject *argument_keys(OpRecorder *self, PyObject *args, CallTensors *c) {
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    PyObject *key = PyTuple_New(n);
    for (Py_ssize_t i = 0; key != NULL && i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i), *item = NULL;
        Py_ssize_t items = tensor_list_length(self, a);
        if (is_plain_tensor(self, a)) {
            if (c->n >= MAX_TENSORS - 1) goto python;
            add_tensor(c, a, i, 0, PyTuple_GET_ITEM(self->arg_slots, i));
            item = Py_NewRef(self->tensor_marker);
        } else if (items > 0) { /* arguments.py encode_call: (_TENSORS, length), one slot per item */
            PyObject *item_slots = PyTuple_GET_ITEM(self->list_slots, i); /* one per MAX_ARGS position */
            if (c->n + items >= MAX_TENSORS - 1 || !PyTuple_CheckExact(item_slots) ||
                items > PyTuple_GET_SIZE(item_slots))
                goto python;
            for (Py_ssize_t j = 0; j < items; j++)
                add_tensor(c, PySequence_Fast_GET_ITEM(a, j), i, 1, PyTuple_GET_ITEM(item_slots, j));
            item = Py_BuildValue("(On)", self->tensors_marker, items);
        } else if ((item = argument_key(self, a)) == NULL && !PyErr_Occurred()) {
            goto python;
        }
        if (item == NULL) Py_CLEAR(key);
        else PyTuple_SET_ITEM(key, i, item);
    }
    return key;
python:
    Py_DECREF(key);
    return NULL;
}

/* The outputs added to `c`: one tensor, or each tensor of a tuple or list out, whose shape
 * goes into c->out_key. 1, or 0 where the Python path records the op. */
static int add_outputs(OpRecorder *self, PyObject *out, Py_ssize_t out_items, CallTensors *c) {
    if (out_items == 0) {
        add_tensor(c, out, -1, 0, self->out_slot);
        return 1;
    }
    long long first_out = c->n, present = 0;
    for (Py_ssize_t i = 0; i < out_items; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(out, i);
        if (item == Py_None) continue;
        if (c->n >= MAX_TENSORS) return 0;
        add_tensor(c, item, -1, 0, PyTuple_GET_ITEM(self->out_item_slots, i));
        present |= 1LL << i;
    }
    c->out_key = first_out | ((long long)out_items << OUT_KEY_ITEMS_SHIFT) | (present << OUT_KEY_PRESENT_SHIFT);
    return 1;
}

/* Phase 1 for the output of an op with a propagation rule, its operands (every earlier tensor)
 * read: what it inherits from them, then its state. 1 ready, 0 Python's, -1 error. */
static int output_facts(OpRecorder *self, CallTensors *c, int k, int propagation, PyObject *const *argv) {
    Operand operands[MAX_TENSORS];
    for (int j = 0; j < k; j++) {
        Facts *f = c->facts[j].same_as >= 0 ? &c->facts[c->facts[j].same_as] : &c->facts[j];
        operands[j] = (Operand){c->facts[j].tensor, fact_stats(c->facts, j), f->shape, c->positions[j], c->listed[j]};
    }
    Inheritance inherit;
    if (output_inheritance(propagation, argv[4], argv[5], operands, k, argv[6], &inherit) < 0) {
        Py_XDECREF(inherit.source_stats);
        return -1;
    }
    int ready = tensor_facts(self, &c->facts[k], argv[1], argv[2], c->positions[k], &inherit);
    Py_XDECREF(inherit.source_stats); /* tensor_facts took its own reference where it kept them */
    return ready;
}

/* Phase 1: what each distinct tensor is now; nothing changes yet. 1 ready, 0 Python's, -1
 * error. */
static int read_states(OpRecorder *self, CallTensors *c, int propagation, PyObject *const *argv) {
    for (int k = 0; k < c->n; k++) {
        for (int j = 0; j < k; j++)
            if (c->facts[j].tensor == c->facts[k].tensor) {
                c->facts[k].same_as = j;
                break;
            }
        if (c->facts[k].same_as >= 0) continue;
        int ready = k == c->n - 1 && propagation != PROPAGATE_NONE
                        ? output_facts(self, c, k, propagation, argv)
                        : tensor_facts(self, &c->facts[k], argv[1], argv[2], c->positions[k], NULL);
        if (ready <= 0) return ready;
    }
    return 1;
}

/* The event's interned call tuple (op, args JSON, kwargs JSON, out JSON): a new reference, or
 * NULL (with an error set, or none where the Python path records the op). */
static PyObject *call_tuple(OpRecorder *self, PyObject *name, PyObject *key, PyObject *kwargs_json,
                            Py_ssize_t out_items, const CallTensors *c) {
    PyObject *args_json = PyDict_GetItemWithError(self->interned_args, key), *call;
    if (args_json == NULL) {
        if (PyErr_Occurred()) return NULL;
        if (PyDict_GET_SIZE(self->interned_args) > INTERNED_LIMIT) PyDict_Clear(self->interned_args);
        args_json = PyObject_CallOneArg(self->placeholders_json, key);
        int stored = args_json != NULL ? PyDict_SetItem(self->interned_args, key, args_json) : -1;
        Py_XDECREF(args_json); /* the dict holds it */
        if (stored < 0) return NULL;
    }
    if (out_items == 0) {
        if (c->n - 1 >= PyTuple_GET_SIZE(self->out_jsons)) return NULL;
        call = PyTuple_Pack(4, name, args_json, kwargs_json, PyTuple_GET_ITEM(self->out_jsons, c->n - 1));
    } else {
        PyObject *out_json = out_list_json(self, c->out_key);
        if (out_json == NULL) return NULL;
        call = PyTuple_Pack(4, name, args_json, kwargs_json, out_json);
        Py_DECREF(out_json);
    }
    if (call == NULL) return NULL;
    if (PyDict_GET_SIZE(self->calls) > INTERNED_LIMIT) PyDict_Clear(self->calls);
    PyObject *interned = PyDict_SetDefault(self->calls, call, call);
    Py_XSETREF(call, Py_XNewRef(interned));
    return call;
}

/* Phase 2: the new states' rows, the event_tensors rows and the event's row. */
static int write_rows(OpRecorder *self, CallTensors *c, PyObject *call, PyObject *stage, PyObject *where,
                      long long seq) {
    for (int k = 0; k < c->n; k++) {
        Facts *f = &c->facts[k];
        if (f->same_as >= 0) f->tensor_id = c->facts[f->same_as].tensor_id;
        else if (!f->known && write_state(self, f, seq) < 0) return -1;
    }
    PyObject *uses = self->use_appends, *events = self->event_appends;
    for (int k = 0; k < c->n; k++)
        if (call_append(uses, USE_SLOT, c->slots[k]) < 0 || append_long(uses, USE_TENSOR_ID, c->facts[k].tensor_id) < 0)
            return -1;
    /* The rows' seq and count, once (capture/store/table_buffer.py BUFFER_RUNS: k is 0, 1, ... in order). */
    if (c->n > 0 && (append_long(uses, USE_RUN_SEQ, seq) < 0 || append_long(uses, USE_RUN_LENGTH, c->n) < 0))
        return -1;
    if (append_long(events, EVENT_SEQ, seq) < 0 || call_append(events, EVENT_CALL, call) < 0 ||
        call_append(events, EVENT_STAGE, stage) < 0 || call_append(events, EVENT_WHERE, where) < 0)
        return -1;
    return 0;
}

/* Whether a user's dispatch mode is underneath (the Python path's guarded record): 1 yes, 0
 * no, -1 error. */
static int under_a_mode(OpRecorder *self) {
    PyObject *depth = PyObject_CallNoArgs(self->dispatch_depth);
    if (depth == NULL) return -1;
    long modes = PyLong_AsLong(depth);
    Py_DECREF(depth);
    return modes == -1 && PyErr_Occurred() ? -1 : modes != 0;
}

/* record(name, written_positions, wanted_positions, propagation, args, kwargs, out) -> seq, or -1
 * when the Python path must record the op (`propagation`: a PROPAGATE_* value,
 * OpPlan.native_propagation). */
PyObject *OpRecorder_record(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "record(name, written_positions, wanted_positions, propagation, args, kwargs, out)");
        return NULL;
    }
    PyObject *args = argv[4], *key = NULL, *stage = NULL, *where = NULL, *call = NULL, *result = NULL;
    long propagation = PyLong_AsLong(argv[3]);
    if (propagation == -1 && PyErr_Occurred()) return NULL;
    Py_ssize_t out_items = out_items_of(self, argv[6]);
    if (out_items < 0 || !PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) > MAX_ARGS) return PyLong_FromLong(-1);
    if (out_items > 0) propagation = PROPAGATE_NONE; /* the rules read one output (dispatch.py: `t is out`) */
    int mode = under_a_mode(self);
    if (mode != 0) return mode < 0 ? NULL : PyLong_FromLong(-1);
    PyObject *kwargs_json = keyword_json(self, argv[5]); /* a new reference: the table may be cleared meanwhile */
    if (kwargs_json == NULL) return PyErr_Occurred() ? NULL : PyLong_FromLong(-1);
    CallTensors c; /* not zeroed: add_tensor initialises each fact it adds */
    c.n = 0, c.out_key = 0;
    if ((key = argument_keys(self, args, &c)) == NULL) goto python;
    if (!add_outputs(self, argv[6], out_items, &c)) goto python;
    int ready = read_states(self, &c, (int)propagation, argv);
    if (ready <= 0) goto python;
    if (event_context(self, &stage, &where) < 0) goto done;
    if ((call = call_tuple(self, argv[0], key, kwargs_json, out_items, &c)) == NULL) goto python;
    long long seq = take_seq(self, argv[0]);
    if (seq < 0 || write_rows(self, &c, call, stage, where, seq) < 0) goto done;
    self->recorded++;
    if (after_event(self, seq) < 0) goto done;
    result = PyLong_FromLongLong(seq);
    goto done;
python: /* -1 where nothing went wrong: the Python path records the op */
    if (!PyErr_Occurred()) result = PyLong_FromLong(-1);
done:
    clear_facts(c.facts, c.n);
    Py_XDECREF(kwargs_json);
    Py_XDECREF(call);
    Py_XDECREF(stage);
    Py_XDECREF(where);
    Py_XDECREF(key);
    return result;
}
