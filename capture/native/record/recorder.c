/* spiketrace.capture.native._native.OpRecorder: the compiled record bound to one recording.
 *
 * capture/ops/native_record.py builds one per Recorder with the Python path's own objects
 * (buffers' bound appends, the registry's tables, the interning tables, the counters), each a
 * keyword argument named as the field it fills; the checks here are everything the record later
 * reads without checking again (a tuple's length, a table's type, the level's range). */
#include "record/record.h"

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
    FIELD(seq_counter), FIELD(tensor_ids), FIELD(uids), FIELD(defer), FIELD(pend_row),
};
#define N_FIELDS (sizeof(FIELDS) / sizeof(FIELDS[0]))
#define SLOT(self, i) ((PyObject **)((char *)(self) + FIELDS[i].offset))

/* The tuples' lengths (-1: any), the tables' types, the level's range and the bit formats'
 * shape: 0, or -1 with a TypeError naming what is wrong. */
static int check_fields(OpRecorder *self) {
    const char *tuples[] = {"event_appends", "use_appends", "row_appends", "arg_slots", "out_jsons", "free_appends",
                            "kwarg_types", "list_slots", "out_item_slots"};
    PyObject *checks[] = {self->event_appends, self->use_appends, self->row_appends, self->arg_slots, self->out_jsons,
                          self->free_appends, self->kwarg_types, self->list_slots, self->out_item_slots};
    Py_ssize_t sizes[] = {EVENT_COLUMNS, USE_COLUMNS, ROW_COLUMNS, MAX_ARGS, -1,
                          FREE_COLUMNS,  -1,          MAX_ARGS,    MAX_TENSORS};
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
    if (!PyBool_Check(self->defer) || !PyCallable_Check(self->pend_row)) {
        PyErr_SetString(PyExc_TypeError, "OpRecorder: defer must be a bool and pend_row callable");
        return -1;
    }
    long level = PyLong_CheckExact(self->level) ? PyLong_AsLong(self->level) : -1;
    if (level < 0 || level >= LEVELS) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "OpRecorder: level must be an index of LEVELS");
        return -1;
    }
    Py_ssize_t position = 0;
    PyObject *dtype, *format;
    while (PyDict_Next(self->bit_formats, &position, &dtype, &format)) {
        if (!PyTuple_Check(format) || PyTuple_GET_SIZE(format) != FORMAT_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "OpRecorder: a bit format is a tuple of BIT_FORMAT_FIELDS");
            return -1;
        }
    }
    return 0;
}

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
        PyObject *own = PyObject_GetAttr((PyObject *)self, s_freed);
        if (own == NULL) return -1;
        Py_SETREF(self->freed, own);
    }
    return check_fields(self);
}

/* The fields set after init (caches of the last event, the CPU forms), for traverse and clear. */
#define CACHES(self)                                                                                         \
    {&(self)->context_key, &(self)->stage_tuple, &(self)->where_tuple, &(self)->stateful_seen,             \
     &(self)->stateful_list, &(self)->thread_value, &(self)->scope_generation, &(self)->scope_value,        \
     &(self)->state_kinds, &(self)->state_row_kinds, &(self)->state_forms}
#define N_CACHES 11

static int OpRecorder_traverse(OpRecorder *self, visitproc visit, void *arg) {
    for (size_t i = 0; i < N_FIELDS; i++) Py_VISIT(*SLOT(self, i));
    PyObject **caches[N_CACHES] = CACHES(self);
    for (int i = 0; i < N_CACHES; i++) Py_VISIT(*caches[i]);
    return 0;
}

static int OpRecorder_clear(OpRecorder *self) {
    for (size_t i = 0; i < N_FIELDS; i++) Py_CLEAR(*SLOT(self, i));
    PyObject **caches[N_CACHES] = CACHES(self);
    for (int i = 0; i < N_CACHES; i++) Py_CLEAR(*caches[i]);
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
     "record(name, written_positions, wanted_positions, propagation, args, kwargs, out) -> the event's seq, or -1 "
     "where the Python path records the op"},
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

PyTypeObject OpRecorderType = {
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
