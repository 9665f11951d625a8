/* spiketrace.capture.native._native.OpRecorder: the per-op record of capture/ops/dispatch.py's OpLog.record, in C,
 * for the ops that make up nearly every step: positional arguments that are plain CPU
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
 * arithmetic identities (x * 1, x + 0, an all-zero operand, spikes * 0) are applied here; a
 * rule this code does not apply goes to the Python path when the output is large enough
 * that the scan it saves costs more than that path.
 *
 * This file: the type, the record's two phases and what follows an event (neuron memory
 * snapshots, the flush check), and the weakref callback. The parts of an event are in
 * _native_call.c, the tensor states in _native_state.c, the arithmetic rules in
 * _native_rules.c.
 */
#include "_native_record.h"
#include "_native.h"

PyObject *s_version, *s_shape, *s_requires_grad, *s_dtype, *s_device, *s_layout, *s_is_meta, *s_is_neg,
    *s_is_cpu, *s_storage_offset, *s_stride, *s_data_ptr, *s_untyped_storage, *s_nbytes, *s_steps_recorded, *s_step_index,
    *s_current_record, *s_current_stage, *s_stage_id, *s_name, *s_phase,
    *s_unlabeled, *s_empty_kwargs, *s_written_positions, *s_generation, *s_tracker, *s_stateful_generation, *s_active_stateful,
    *s_memory_snapshots, *s_memories, *s_catalog, *s_ids, *s_stateful, *s_active_modules;

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
        Py_INCREF(item); /* held: reading an attribute may run Python code */
        PyObject *previous = PyDict_GetItemWithError(snapshots, PyTuple_GET_ITEM(item, 0));
        Py_XINCREF(previous);
        PyObject *memories = previous ? PyObject_GetAttr(PyTuple_GET_ITEM(item, 1), s_memories) : NULL;
        Py_DECREF(item);
        if (memories == NULL) {
            Py_XDECREF(previous);
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
        Py_DECREF(previous);
    }
    Py_DECREF(snapshots);
    return unchanged;
}

/* RecordingContext.snapshot_memories's list of the active stateful neurons, rebuilt for the
 * tracker's new generation as it builds it: [(module_id, module) for each module of
 * tracker.active_modules, in its order, that catalog.stateful holds]. 1 done; 0 where Python
 * must (tables of other types); -1 error. */
static int refresh_active_stateful(OpRecorder *self, PyObject *tracker, PyObject *generation) {
    int result = -1;
    PyObject *catalog = NULL, *ids = NULL, *stateful = NULL, *modules = NULL, *iterator = NULL, *list = NULL, *m;
    if ((catalog = PyObject_GetAttr(self->context, s_catalog)) == NULL || (ids = PyObject_GetAttr(catalog, s_ids)) == NULL ||
        (stateful = PyObject_GetAttr(catalog, s_stateful)) == NULL ||
        (modules = PyObject_GetAttr(tracker, s_active_modules)) == NULL)
        goto done;
    if (!PyDict_CheckExact(ids) || !PyAnySet_CheckExact(stateful)) {
        result = 0;
        goto done;
    }
    if ((list = PyList_New(0)) == NULL || (iterator = PyObject_GetIter(modules)) == NULL) goto done;
    while ((m = PyIter_Next(iterator)) != NULL) {
        PyObject *key = PyLong_FromVoidPtr(m);
        PyObject *module_id = key ? PyDict_GetItemWithError(ids, key) : NULL;
        Py_XDECREF(key);
        int keep = module_id != NULL ? PySet_Contains(stateful, module_id) : (PyErr_Occurred() ? -1 : 0);
        PyObject *item = keep > 0 ? PyTuple_Pack(2, module_id, m) : NULL;
        Py_DECREF(m);
        if (keep < 0 || (keep > 0 && (item == NULL || PyList_Append(list, item) < 0))) {
            Py_XDECREF(item);
            goto done;
        }
        Py_XDECREF(item);
    }
    if (PyErr_Occurred() || PyObject_SetAttr(self->context, s_active_stateful, list) < 0 ||
        PyObject_SetAttr(self->context, s_stateful_generation, generation) < 0)
        goto done;
    result = 1;
done:
    Py_XDECREF(catalog);
    Py_XDECREF(ids);
    Py_XDECREF(stateful);
    Py_XDECREF(modules);
    Py_XDECREF(iterator);
    Py_XDECREF(list);
    return result;
}

/* What OpLog.record does after an event: neuron memory snapshots while a stateful neuron is
 * active (RecordingContext.snapshot_memories, called only when it has anything to look at),
 * and the writer's flush check. */
static int after_event(OpRecorder *self, long long seq) {
    /* The generation event_context read for this event: while it is the very object the held
     * list was read under, the active neurons are that list (most ops). */
    PyObject *generation = self->scope_generation, *active;
    int look = 0;
    if (generation != NULL && generation == self->stateful_seen) {
        active = Py_NewRef(self->stateful_list);
    } else {
        PyObject *tracker = PyObject_GetAttr(self->context, s_tracker); /* built after this object */
        generation = tracker ? PyObject_GetAttr(tracker, s_generation) : NULL;
        PyObject *seen = generation ? PyObject_GetAttr(self->context, s_stateful_generation) : NULL;
        look = seen ? PyObject_RichCompareBool(generation, seen, Py_NE) : -1; /* active modules changed */
        if (look == 1) { /* their list rebuilt here, where it can be: Python then looks only at changed memories */
            int rebuilt = refresh_active_stateful(self, tracker, generation);
            look = rebuilt < 0 ? -1 : rebuilt == 0;
        }
        Py_XDECREF(seen);
        Py_XDECREF(tracker);
        active = look < 0 ? NULL : PyObject_GetAttr(self->context, s_active_stateful);
        if (active != NULL && look == 0 && PyList_CheckExact(active)) { /* the list of this generation */
            Py_XSETREF(self->stateful_seen, Py_NewRef(generation));
            Py_XSETREF(self->stateful_list, Py_NewRef(active));
        }
        Py_XDECREF(generation);
    }
    if (active == NULL) return -1;
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
    PyObject *seq = uid == Py_None ? NULL : counter_value(self->seq_counter);
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
PyObject *OpRecorder_record(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "record(name, written_positions, wanted_positions, propagation, args, kwargs, out)");
        return NULL;
    }
    PyObject *name = argv[0], *written_positions = argv[1], *wanted_positions = argv[2], *args = argv[4],
             *out = argv[6];
    long propagation = PyLong_AsLong(argv[3]);
    if (propagation == -1 && PyErr_Occurred()) return NULL;
    PyObject *key = NULL, *stage = NULL, *where = NULL, *call = NULL, *result = NULL, *kwargs_json = NULL;
    Facts facts[MAX_TENSORS];
    PyObject *slots[MAX_TENSORS];
    int n_tensors = 0, n_facts = 0;
    /* One tensor out, or a tuple or list of tensors and Nones (convolution_backward, batch norm,
     * unbind): arguments.py encode_call's ("out", i) slot per tensor, a JSON list of them. */
    Py_ssize_t out_items = 0;
    if (!is_plain_tensor(self, out)) {
        if (!PyTuple_CheckExact(out) && !PyList_CheckExact(out)) return PyLong_FromLong(-1);
        out_items = PySequence_Fast_GET_SIZE(out);
        if (out_items == 0 || out_items > MAX_TENSORS - 1) return PyLong_FromLong(-1);
        for (Py_ssize_t i = 0; i < out_items; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(out, i);
            if (item != Py_None && !is_plain_tensor(self, item)) return PyLong_FromLong(-1);
        }
        propagation = PROPAGATE_NONE; /* the rules read one output (dispatch.py: `t is out`) */
    }
    if (!PyTuple_CheckExact(args) || PyTuple_GET_SIZE(args) > MAX_ARGS) return PyLong_FromLong(-1);
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
    int listed[MAX_TENSORS]; /* an item of a tensor list argument (cat, stack), not the argument itself */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        PyObject *item;
        Py_ssize_t items = tensor_list_length(self, a);
        if (is_plain_tensor(self, a)) {
            if (n_tensors >= MAX_TENSORS - 1) goto python;
            positions[n_tensors] = i;
            listed[n_tensors] = 0;
            slots[n_tensors] = PyTuple_GET_ITEM(self->arg_slots, i);
            facts[n_tensors++].tensor = a;
            item = Py_NewRef(self->tensor_marker);
        } else if (items > 0) { /* arguments.py encode_call: (_TENSORS, length), one slot per item */
            PyObject *item_slots = PyTuple_GET_ITEM(self->list_slots, i); /* one per MAX_ARGS position */
            if (n_tensors + items >= MAX_TENSORS - 1 || !PyTuple_CheckExact(item_slots) ||
                items > PyTuple_GET_SIZE(item_slots))
                goto python;
            for (Py_ssize_t j = 0; j < items; j++) {
                positions[n_tensors] = i;
                listed[n_tensors] = 1;
                slots[n_tensors] = PyTuple_GET_ITEM(item_slots, j);
                facts[n_tensors++].tensor = PySequence_Fast_GET_ITEM(a, j);
            }
            item = Py_BuildValue("(On)", self->tensors_marker, items);
            if (item == NULL) goto done;
        } else {
            item = argument_key(self, a);
            if (item == NULL) {
                if (PyErr_Occurred()) goto done;
                goto python;
            }
        }
        PyTuple_SET_ITEM(key, i, item);
    }
    int first_out = n_tensors;
    long long out_key = 0; /* a listed out's shape: first placeholder, item count, which items are tensors */
    if (out_items == 0) {
        positions[n_tensors] = -1;
        listed[n_tensors] = 0;
        slots[n_tensors] = self->out_slot;
        facts[n_tensors++].tensor = out;
    } else {
        long long present = 0;
        for (Py_ssize_t i = 0; i < out_items; i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(out, i);
            if (item == Py_None) continue;
            if (n_tensors >= MAX_TENSORS) goto python;
            positions[n_tensors] = -1;
            listed[n_tensors] = 0;
            slots[n_tensors] = PyTuple_GET_ITEM(self->out_item_slots, i);
            facts[n_tensors++].tensor = item;
            present |= 1LL << i;
        }
        out_key = (long long)first_out | ((long long)out_items << 8) | (present << 16);
    }
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
                if (n_tensors > 1 && positions[0] == 0 && !listed[0] &&
                    (inherit.source_stats = fact_stats(facts, 0)) != NULL) {
                    Facts *source = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    if ((inherit.source_numel = shape_numel(source->shape)) < 0) goto done;
                }
            } else if (propagation == PROPAGATE_PYTHON) {
                inherit.to_python = 1;
            } else if (propagation == PROPAGATE_CONCAT) { /* concatenated: the parts' counts add up */
                long long nnz = 0;
                int binary = 1, parts = 0, known = 0;
                for (int j = 0; j < k && positions[j] == 0 && listed[j]; j++) { /* the items of args[0] */
                    PyObject *part = fact_stats(facts, j);
                    parts++;
                    if (part == NULL) continue;
                    known++;
                    nnz += PyLong_AsLongLong(PyTuple_GET_ITEM(part, 0));
                    binary = binary && PyTuple_GET_ITEM(part, 1) == Py_True;
                }
                if (PyErr_Occurred()) goto done;
                if (parts > 0 && known == parts) {
                    PyObject *out_shape = tensor_attribute(out, TENSOR_SHAPE);
                    if (out_shape == NULL) goto done;
                    inherit.source_numel = shape_numel(out_shape); /* the output holds every part's elements */
                    Py_DECREF(out_shape);
                    if (inherit.source_numel < 0) goto done;
                    if ((derived = stats_tuple(nnz, binary ? Py_True : Py_False)) == NULL) goto done;
                    inherit.source_stats = derived;
                }
            } else if (propagation == PROPAGATE_BINARY_CAST || propagation == PROPAGATE_NEGATE) {
                PyObject *source = n_tensors > 1 && positions[0] == 0 && !listed[0] ? fact_stats(facts, 0) : NULL;
                if (source != NULL && (propagation == PROPAGATE_NEGATE || PyTuple_GET_ITEM(source, 1) == Py_True)) {
                    Facts *operand = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    if ((inherit.source_numel = shape_numel(operand->shape)) < 0) goto done;
                    if (propagation == PROPAGATE_NEGATE) {
                        long long nnz = PyLong_AsLongLong(PyTuple_GET_ITEM(source, 0));
                        if (nnz == -1 && PyErr_Occurred()) goto done;
                        if ((derived = stats_tuple(nnz, nnz == 0 ? Py_True : Py_False)) == NULL) goto done;
                        source = derived;
                    }
                    inherit.source_stats = source;
                }
            } else { /* arithmetic and 1 - x: capture/native/_native_rules.c */
                Operand x_operand, other_operand, out_operand;
                const Operand *x = NULL, *other = NULL;
                if (n_tensors > 1 && positions[0] == 0 && !listed[0]) {
                    Facts *f = facts[0].same_as >= 0 ? &facts[facts[0].same_as] : &facts[0];
                    x_operand = (Operand){facts[0].tensor, fact_stats(facts, 0), f->shape};
                    x = &x_operand;
                }
                if (n_tensors > 2 && positions[1] == 1 && !listed[1]) {
                    Facts *f = facts[1].same_as >= 0 ? &facts[facts[1].same_as] : &facts[1];
                    other_operand = (Operand){facts[1].tensor, fact_stats(facts, 1), f->shape};
                    other = &other_operand;
                }
                out_operand = (Operand){out, NULL, tensor_attribute(out, TENSOR_SHAPE)};
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
    if (event_context(self, &stage, &where) < 0) goto done;
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
    if (out_items == 0) {
        if (n_tensors - 1 >= PyTuple_GET_SIZE(self->out_jsons)) goto python;
        call = PyTuple_Pack(4, name, args_json, kwargs_json, PyTuple_GET_ITEM(self->out_jsons, n_tensors - 1));
    } else {
        PyObject *out_json = out_list_json(self, out_key);
        if (out_json == NULL) goto done;
        call = PyTuple_Pack(4, name, args_json, kwargs_json, out_json);
        Py_DECREF(out_json);
    }
    if (call == NULL) goto done;
    if (PyDict_GET_SIZE(self->calls) > INTERNED_LIMIT) PyDict_Clear(self->calls);
    PyObject *interned_call = PyDict_SetDefault(self->calls, call, call);
    if (interned_call == NULL) goto done;
    Py_SETREF(call, Py_NewRef(interned_call));

    /* Phase 2: the rows. */
    long long seq = take_seq(self, name);
    if (seq < 0) goto done;
    for (int k = 0; k < n_tensors; k++) {
        Facts *f = &facts[k];
        if (f->same_as >= 0) {
            f->tensor_id = facts[f->same_as].tensor_id;
        } else if (!f->known && write_state(self, f, seq) < 0) {
            goto done;
        }
    }
    for (int k = 0; k < n_tensors; k++) {
        if (call_append(self->use_appends, 2, slots[k]) < 0 || append_long(self->use_appends, 3, facts[k].tensor_id) < 0)
            goto done;
    }
    /* The rows' seq and count, once (capture/store/table_buffer.py BUFFER_RUNS: k is 0, 1, ... in order). */
    if (n_tensors > 0 && (append_long(self->use_appends, 0, seq) < 0 || append_long(self->use_appends, 1, n_tensors) < 0))
        goto done;
    if (append_long(self->event_appends, 0, seq) < 0 || call_append(self->event_appends, 1, call) < 0 ||
        call_append(self->event_appends, 2, stage) < 0 || call_append(self->event_appends, 3, where) < 0)
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
    Py_XDECREF(stage);
    Py_XDECREF(where);
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
    FIELD(refs), FIELD(freed), FIELD(kinds), FIELD(make_kind),
    FIELD(parameter_names), FIELD(interned_args), FIELD(placeholders_json), FIELD(arg_slots), FIELD(out_slot),
    FIELD(out_jsons), FIELD(out_item_slots), FIELD(out_list_json), FIELD(out_list_jsons), FIELD(tensor_marker),
    FIELD(float_marker), FIELD(ints_marker), FIELD(bool_marker), FIELD(tensors_marker),
    FIELD(list_slots), FIELD(skipped), FIELD(calls), FIELD(wheres),
    FIELD(tensor_type), FIELD(parameter_type), FIELD(strided), FIELD(bit_formats), FIELD(is_grad_enabled),
    FIELD(graph_task_id), FIELD(in_recomputation), FIELD(dispatch_depth), FIELD(thread_index), FIELD(scope_id),
    FIELD(storage_pointer), FIELD(level), FIELD(free_appends), FIELD(snapshot_memories), FIELD(event_seqs),
    FIELD(maybe_flush), FIELD(flush_rows), FIELD(interned_kwargs), FIELD(kwargs_json), FIELD(kwarg_types),
    FIELD(seq_counter), FIELD(tensor_ids), FIELD(uids),
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
                            "kwarg_types", "list_slots", "out_item_slots"};
    PyObject *checks[] = {self->event_appends, self->use_appends, self->row_appends, self->arg_slots, self->out_jsons,
                          self->free_appends, self->kwarg_types, self->list_slots, self->out_item_slots};
    Py_ssize_t sizes[] = {4, 4, 8, MAX_ARGS, -1, 2, -1, MAX_ARGS, MAX_TENSORS};
    for (int i = 0; i < 9; i++) {
        if (!PyTuple_CheckExact(checks[i]) || (sizes[i] >= 0 && PyTuple_GET_SIZE(checks[i]) != sizes[i])) {
            PyErr_Format(PyExc_TypeError, "OpRecorder: %s must be a tuple of %zd", tuples[i], sizes[i]);
            return -1;
        }
    }
    PyObject *dicts[] = {self->entries, self->refs, self->kinds, self->parameter_names,
                         self->interned_args, self->calls, self->bit_formats, self->interned_kwargs, self->wheres,
                         self->out_list_jsons};
    for (size_t i = 0; i < sizeof(dicts) / sizeof(dicts[0]); i++) {
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
    Py_VISIT(self->stage_tuple);
    Py_VISIT(self->where_tuple);
    Py_VISIT(self->stateful_seen);
    Py_VISIT(self->stateful_list);
    Py_VISIT(self->thread_value);
    Py_VISIT(self->scope_generation);
    Py_VISIT(self->scope_value);
    Py_VISIT(self->cpu_kinds);
    Py_VISIT(self->cpu_row_kinds);
    Py_VISIT(self->cpu_forms);
    return 0;
}

static int OpRecorder_clear(OpRecorder *self) {
    for (size_t i = 0; i < N_FIELDS; i++) Py_CLEAR(*SLOT(self, i));
    Py_CLEAR(self->context_key);
    Py_CLEAR(self->stage_tuple);
    Py_CLEAR(self->where_tuple);
    Py_CLEAR(self->stateful_seen);
    Py_CLEAR(self->stateful_list);
    Py_CLEAR(self->thread_value);
    Py_CLEAR(self->scope_generation);
    Py_CLEAR(self->scope_value);
    Py_CLEAR(self->cpu_kinds);
    Py_CLEAR(self->cpu_row_kinds);
    Py_CLEAR(self->cpu_forms);
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
    {"module_event", (PyCFunction)(void (*)(void))OpRecorder_module_event, METH_FASTCALL,
     "module_event(kind, module, module_id, tracker_name, tensors, kwarg_tensors, inputs_require_grad, "
     "call_index, wanted, appends, interned) -> the row's seq, or -1 where the Python path writes it"},
    {"describe", (PyCFunction)(void (*)(void))OpRecorder_describe, METH_FASTCALL,
     "describe(tensor, seq) -> the tensor_id of its current state (its row written when new), or -1 where the "
     "Python path describes it"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef OpRecorder_members[] = {
    {"recorded", T_LONGLONG, offsetof(OpRecorder, recorded), READONLY, "events recorded by the compiled path"},
    {"hooks_recorded", T_LONGLONG, offsetof(OpRecorder, hooks_recorded), READONLY,
     "module_events rows written by the compiled path"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject OpRecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spiketrace.capture.native._native.OpRecorder",
    .tp_basicsize = sizeof(OpRecorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The per-op record of capture/ops/dispatch.py's OpLog for the common call, in C.",
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
        {&s_data_ptr, "data_ptr"}, {&s_untyped_storage, "untyped_storage"}, {&s_nbytes, "nbytes"},
        {&s_steps_recorded, "steps_recorded"},
        {&s_step_index, "step_index"}, {&s_current_record, "current_record"}, {&s_current_stage, "current_stage"},
        {&s_stage_id, "stage_id"},
        {&s_name, "name"}, {&s_phase, "phase"}, {&s_unlabeled, "unlabeled"}, {&s_empty_kwargs, "{}"},
        {&s_written_positions, "written_positions"}, {&s_generation, "generation"}, {&s_tracker, "tracker"},
        {&s_stateful_generation, "_stateful_generation"}, {&s_active_stateful, "_active_stateful"},
        {&s_memory_snapshots, "_memory_snapshots"}, {&s_memories, "_memories"}, {&s_catalog, "catalog"},
        {&s_ids, "ids"}, {&s_stateful, "stateful"}, {&s_active_modules, "active_modules"},
    };
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        *strings[i].target = PyUnicode_InternFromString(strings[i].text);
        if (*strings[i].target == NULL) return -1;
    }
    return native_add_type(module, &OpRecorderType, "OpRecorder");
}
