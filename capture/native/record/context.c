/* An event's context for the compiled record (record/record.c, record/hooks.c): the seq it takes,
 * the calling thread's index and the event's $stage and $where tuples, as capture/ops/dispatch.py's
 * OpLog.record_in_python builds them from the RecordingContext (capture/context.py). */
#include "record/record.h"

/* The context's thread_index() of the calling thread (a new reference), called only when the
 * thread changed. */
PyObject *current_thread(OpRecorder *self) {
    unsigned long ident = PyThread_get_thread_ident();
    if (self->thread_value == NULL || ident != self->thread_ident) {
        PyObject *index = PyObject_CallNoArgs(self->thread_index);
        if (index == NULL) return NULL;
        Py_XSETREF(self->thread_value, index);
        self->thread_ident = ident;
    }
    return Py_NewRef(self->thread_value);
}

/* RecordingContext.take_seq() and its current_record: the seq the record takes, or -1 with
 * an exception set. */
long long take_seq(OpRecorder *self, PyObject *record) {
    long long seq = counter_take(self->seq_counter);
    if (seq < 0) return -1;
    PyObject *steps = PyObject_GetAttr(self->context, s_steps_recorded);
    PyObject *step = steps ? PyObject_GetAttr(self->context, s_step_index) : NULL;
    int added = step ? PySet_Add(steps, step) : -1;
    Py_XDECREF(step);
    Py_XDECREF(steps);
    if (added < 0 || PyObject_SetAttr(self->context, s_current_record, record) < 0) return -1;
    return seq;
}

/* The context's scope_id() (a new reference), called only when the tracker's generation changed
 * since the last call. */
static PyObject *current_scope(OpRecorder *self) {
    PyObject *tracker = PyObject_GetAttr(self->context, s_tracker);
    PyObject *generation = tracker ? PyObject_GetAttr(tracker, s_generation) : NULL;
    Py_XDECREF(tracker);
    if (generation == NULL) return NULL;
    int same_scope = self->scope_generation != NULL && generation == self->scope_generation;
    if (!same_scope && self->scope_generation != NULL) {
        same_scope = PyObject_RichCompareBool(generation, self->scope_generation, Py_EQ);
        if (same_scope < 0) {
            Py_DECREF(generation);
            return NULL;
        }
    }
    if (same_scope) {
        Py_DECREF(generation);
        return Py_NewRef(self->scope_value);
    }
    PyObject *value = PyObject_CallNoArgs(self->scope_id);
    if (value == NULL) {
        Py_DECREF(generation);
        return NULL;
    }
    Py_XSETREF(self->scope_value, value);
    Py_XSETREF(self->scope_generation, generation);
    return Py_NewRef(value);
}

/* An event's $stage tuple (table_buffer.py BUFFER_GROUPS): a new reference, NULL with an
 * exception set. */
static PyObject *stage_tuple(PyObject *stage, PyObject *step) {
    if (stage == Py_None) {
        PyObject *values[STAGE_FIELDS] = {[STAGE_STEP] = step, [STAGE_ID] = Py_None, [STAGE_NAME] = s_unlabeled,
                                          [STAGE_PHASE] = Py_None};
        return pack_fields(values, STAGE_FIELDS);
    }
    PyObject *stage_id = PyObject_GetAttr(stage, s_stage_id);
    PyObject *name = stage_id ? PyObject_GetAttr(stage, s_name) : NULL;
    PyObject *phase = name ? PyObject_GetAttr(stage, s_phase) : NULL, *tuple = NULL;
    if (phase != NULL) {
        PyObject *values[STAGE_FIELDS] = {[STAGE_STEP] = step, [STAGE_ID] = stage_id, [STAGE_NAME] = name,
                                          [STAGE_PHASE] = phase};
        tuple = pack_fields(values, STAGE_FIELDS);
    }
    Py_XDECREF(stage_id);
    Py_XDECREF(name);
    Py_XDECREF(phase);
    return tuple;
}

/* The parts of an event's context key, in this order: the $stage tuple changes with the stage
 * object or the step, the $where tuple with the rest. */
enum { PART_STAGE, PART_STEP, PART_GRAD, PART_BACKWARD, PART_THREAD, PART_SCOPE, PART_RECOMPUTE, PARTS };

/* The held $stage and $where tuples made anew for an event whose context `parts` differs from
 * the last event's: 0, or -1 with an exception set. */
static int refresh_tuples(OpRecorder *self, PyObject *const *parts) {
    PyObject *key = pack_fields(parts, PARTS);
    if (key == NULL) return -1;
    PyObject *previous = self->context_key;
    int same_stage = previous != NULL && PyTuple_GET_ITEM(previous, PART_STAGE) == parts[PART_STAGE];
    if (same_stage)
        same_stage = PyObject_RichCompareBool(PyTuple_GET_ITEM(previous, PART_STEP), parts[PART_STEP], Py_EQ);
    PyObject *stage = same_stage == 0 ? stage_tuple(parts[PART_STAGE], parts[PART_STEP]) : NULL;
    if (same_stage < 0 || (same_stage == 0 && stage == NULL)) {
        Py_DECREF(key);
        return -1;
    }
    if (stage != NULL) Py_XSETREF(self->stage_tuple, stage);
    /* The where tuple, interned with the Python path's (OpLog._wheres) across steps. */
    PyObject *values[WHERE_FIELDS] = {[WHERE_GRAD] = parts[PART_GRAD], [WHERE_BACKWARD] = parts[PART_BACKWARD],
                                      [WHERE_THREAD] = parts[PART_THREAD], [WHERE_SCOPE] = parts[PART_SCOPE],
                                      [WHERE_RECOMPUTE] = parts[PART_RECOMPUTE]};
    PyObject *where = pack_fields(values, WHERE_FIELDS), *interned = NULL;
    if (where != NULL) {
        if (PyDict_GET_SIZE(self->wheres) > INTERNED_LIMIT) PyDict_Clear(self->wheres);
        interned = PyDict_SetDefault(self->wheres, where, where);
    }
    if (interned != NULL) {
        Py_XSETREF(self->where_tuple, Py_NewRef(interned));
        Py_XSETREF(self->context_key, Py_NewRef(key));
    }
    Py_XDECREF(where);
    Py_DECREF(key);
    return interned != NULL ? 0 : -1;
}

/* The event's $stage and $where tuples (new references) into *stage_out and *where_out:
 * 0, or -1 with an exception set. */
int event_context(OpRecorder *self, PyObject **stage_out, PyObject **where_out) {
    PyObject *parts[PARTS] = {NULL};
    int result = -1;
    if ((parts[PART_STAGE] = PyObject_GetAttr(self->context, s_current_stage)) == NULL) goto done;
    if ((parts[PART_STEP] = PyObject_GetAttr(self->context, s_step_index)) == NULL) goto done;
    if ((parts[PART_GRAD] = PyObject_CallNoArgs(self->is_grad_enabled)) == NULL) goto done;
    PyObject *task = PyObject_CallNoArgs(self->graph_task_id);
    long long task_id = task != NULL ? PyLong_AsLongLong(task) : -1;
    Py_XDECREF(task);
    if (task == NULL || (task_id == -1 && PyErr_Occurred())) goto done;
    parts[PART_BACKWARD] = Py_NewRef(task_id != -1 ? Py_True : Py_False);
    parts[PART_RECOMPUTE] = task_id != -1 ? PyObject_CallOneArg(self->in_recomputation, parts[PART_GRAD])
                                          : Py_NewRef(Py_False);
    if (parts[PART_RECOMPUTE] == NULL) goto done;
    /* The context's thread_index() and scope_id(), called only when what they depend on
     * changed: the calling thread, the tracker's generation. */
    if ((parts[PART_THREAD] = current_thread(self)) == NULL) goto done;
    if ((parts[PART_SCOPE] = current_scope(self)) == NULL) goto done;
    /* Most ops find every part the very object the last event had: compared by identity, no
     * key tuple is built for them (the step, an int, may be an equal one: compared by value). */
    int same = self->context_key != NULL;
    for (int i = 0; same > 0 && i < PARTS; i++) {
        PyObject *last = PyTuple_GET_ITEM(self->context_key, i);
        if (last != parts[i]) same = i == PART_STEP ? PyObject_RichCompareBool(last, parts[i], Py_EQ) : 0;
    }
    if (same < 0 || (!same && refresh_tuples(self, parts) < 0)) goto done;
    *stage_out = Py_NewRef(self->stage_tuple);
    *where_out = Py_NewRef(self->where_tuple);
    result = 0;
done:
    for (int i = 0; i < PARTS; i++) Py_XDECREF(parts[i]);
    return result;
}
