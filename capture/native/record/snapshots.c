/* What follows an event in OpLog.record (capture/ops/dispatch.py): neuron memory snapshots while
 * a stateful neuron is active (RecordingContext.snapshot_memories, called only when it has
 * anything to look at), and the writer's flush check. */
#include "record/record.h"


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
int after_event(OpRecorder *self, long long seq) {
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

