/* The compiled write of a module hook's module_events row (capture/modules/module_events.py
 * ModuleEventLog.write, which takes the rest): the same row, its tensors described as the op
 * record describes them (record/state.c), its repeating fields one interned $hook tuple. And
 * describe(), a tensor described alone (a neuron's memories, capture/context.py snapshot). */
#include "record/record.h"

/* Which columns hold the ids a hook saw (module_events.py _INPUT_KINDS, _OUTPUT_KINDS). */
typedef enum { IDS_INPUTS, IDS_OUTPUTS, IDS_NONE } HookIds;

static HookIds hook_ids(PyObject *kind, int *forward, int *forward_post) {
    int forward_pre = PyUnicode_CompareWithASCIIString(kind, HOOK_FORWARD_PRE) == 0;
    *forward_post = PyUnicode_CompareWithASCIIString(kind, HOOK_FORWARD_POST) == 0;
    *forward = forward_pre || *forward_post;
    if (forward_pre || PyUnicode_CompareWithASCIIString(kind, HOOK_BACKWARD_POST) == 0) return IDS_INPUTS;
    if (*forward_post || PyUnicode_CompareWithASCIIString(kind, HOOK_BACKWARD_PRE) == 0) return IDS_OUTPUTS;
    return IDS_NONE;
}

/* The $hook tuple (kind, module_id, tracker_name, stage, phase, grad_enabled, training, thread,
 * inputs_require_grad, recompute), interned in `interned`, a new reference; *stage_id_out the
 * stage's id (a new reference, None outside a stage). */
static PyObject *hook_tuple(OpRecorder *self, PyObject *const *argv, int forward, PyObject *interned,
                            PyObject **stage_id_out) {
    PyObject *stage = NULL, *name = NULL, *phase = NULL, *stage_id = NULL, *grad = NULL, *training = NULL,
             *thread = NULL, *recompute = NULL, *hook = NULL;
    if ((stage = PyObject_GetAttr(self->context, s_current_stage)) == NULL) goto done;
    if (stage == Py_None) {
        name = Py_NewRef(s_unlabeled);
        phase = Py_NewRef(Py_None);
        stage_id = Py_NewRef(Py_None);
    } else if ((name = PyObject_GetAttr(stage, s_name)) == NULL || (phase = PyObject_GetAttr(stage, s_phase)) == NULL ||
               (stage_id = PyObject_GetAttr(stage, s_stage_id)) == NULL) {
        goto done;
    }
    if ((grad = PyObject_CallNoArgs(self->is_grad_enabled)) == NULL) goto done;
    if ((training = PyObject_GetAttr(argv[1], s_training)) == NULL) goto done;
    if ((thread = current_thread(self)) == NULL) goto done;
    recompute = Py_NewRef(Py_False);
    if (forward) { /* a forward inside a recomputation (capture/modules/tracker.py) */
        PyObject *tracker = PyObject_GetAttr(self->context, s_tracker);
        PyObject *depth = tracker ? PyObject_GetAttr(tracker, s_recompute_depth) : NULL;
        Py_XDECREF(tracker);
        long long value = depth ? PyLong_AsLongLong(depth) : -1;
        Py_XDECREF(depth);
        if (value == -1 && PyErr_Occurred()) goto done;
        Py_SETREF(recompute, Py_NewRef(value > 0 ? Py_True : Py_False));
    }
    PyObject *values[HOOK_FIELDS] = {
        [HOOK_KIND] = argv[0], [HOOK_MODULE_ID] = argv[2], [HOOK_TRACKER_NAME] = argv[3], [HOOK_STAGE] = name,
        [HOOK_PHASE] = phase,  [HOOK_GRAD] = grad,         [HOOK_TRAINING] = training,    [HOOK_THREAD] = thread,
        [HOOK_INPUTS_REQUIRE_GRAD] = argv[6],              [HOOK_RECOMPUTE] = recompute,
    };
    if ((hook = pack_fields(values, HOOK_FIELDS)) == NULL) goto done;
    PyObject *found = PyDict_SetDefault(interned, hook, hook);
    if (found == NULL) {
        Py_CLEAR(hook);
        goto done;
    }
    Py_SETREF(hook, Py_NewRef(found));
    if (PyDict_GET_SIZE(interned) > INTERNED_LIMIT) PyDict_Clear(interned);
    *stage_id_out = Py_NewRef(stage_id);
done:
    Py_XDECREF(stage);
    Py_XDECREF(name);
    Py_XDECREF(phase);
    Py_XDECREF(stage_id);
    Py_XDECREF(grad);
    Py_XDECREF(training);
    Py_XDECREF(thread);
    Py_XDECREF(recompute);
    return hook;
}

/* The ids tuple of items [start, start + n) of the hook's tensors (None for a None tensor). */
static PyObject *ids_tuple(Facts *facts, const int *fact_of, Py_ssize_t start, Py_ssize_t n) {
    PyObject *ids = PyTuple_New(n);
    for (Py_ssize_t i = 0; ids != NULL && i < n; i++) {
        int k = fact_of[start + i];
        PyObject *id = k < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(facts[k].tensor_id);
        if (id == NULL) Py_CLEAR(ids);
        else PyTuple_SET_ITEM(ids, i, id);
    }
    return ids;
}

/* Phase 1 of a hook: what each of its tensors is now (the tensors, then the keyword tensors, as
 * Python describes them; each distinct one once, fact_of[i] its fact or -1 for a None); nothing
 * is written yet. 1 ready, 0 Python's, -1 error. */
static int hook_facts(OpRecorder *self, PyObject *tensors, PyObject *kwarg_tensors, PyObject *wanted, Facts *facts,
                      int *fact_of, int *n_facts) {
    Py_ssize_t n = PyList_GET_SIZE(tensors), m = PyList_GET_SIZE(kwarg_tensors);
    for (Py_ssize_t i = 0; i < n + m; i++) {
        PyObject *t = i < n ? PyList_GET_ITEM(tensors, i) : PyList_GET_ITEM(kwarg_tensors, i - n);
        fact_of[i] = -1;
        if (t == Py_None && i < n) continue;
        if (!is_plain_tensor(self, t)) return 0;
        for (int k = 0; k < *n_facts; k++)
            if (facts[k].tensor == t) fact_of[i] = k; /* described once: the same id */
        if (fact_of[i] >= 0) continue;
        Facts *f = &facts[*n_facts];
        *f = (Facts){.tensor = t, .same_as = -1};
        fact_of[i] = (*n_facts)++;
        int ready = tensor_facts(self, f, NULL, wanted, -1, NULL);
        if (ready <= 0) return ready;
    }
    return 1;
}

/* The hook's module_events row (module_events.py _COLUMNS), everything computed before its
 * first append: 0, or -1 with an exception set. */
static int append_hook_row(OpRecorder *self, PyObject *const *argv, long long seq, PyObject *stage_id,
                           HookIds which, int forward_post, PyObject *ids, PyObject *kwarg_ids, PyObject *hook) {
    PyObject *appends = argv[9], *step = PyObject_GetAttr(self->context, s_step_index);
    if (step == NULL) return -1;
    int failed = append_long(appends, MODULE_SEQ, seq) < 0 || call_append(appends, MODULE_CALL_INDEX, argv[7]) < 0 ||
                 call_append(appends, MODULE_STEP, step) < 0 || call_append(appends, MODULE_STAGE_ID, stage_id) < 0 ||
                 call_append(appends, MODULE_INPUTS, which == IDS_INPUTS ? ids : Py_None) < 0 ||
                 call_append(appends, MODULE_OUTPUTS, which == IDS_OUTPUTS ? ids : Py_None) < 0 ||
                 call_append(appends, MODULE_KWARG_INPUTS, forward_post ? kwarg_ids : Py_None) < 0 ||
                 call_append(appends, MODULE_HOOK, hook) < 0;
    Py_DECREF(step);
    return failed ? -1 : 0;
}

/* module_event(kind, module, module_id, tracker_name, tensors, kwarg_tensors,
 * inputs_require_grad, call_index, wanted, appends, interned) -> the row's seq, or -1 (nothing
 * written) where the Python path writes it: a tensor that is not a plain CPU-described one, or
 * arguments of another shape. `appends`: the module_events buffer's bound appends in
 * MODULE_EVENT_COLUMNS order; `interned`: its $hook interning table. */
PyObject *OpRecorder_module_event(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 11) {
        PyErr_SetString(PyExc_TypeError, "module_event takes 11 arguments");
        return NULL;
    }
    PyObject *tensors = argv[4], *kwarg_tensors = argv[5], *appends = argv[9], *interned = argv[10];
    if (!PyUnicode_Check(argv[0]) || !PyList_CheckExact(tensors) || !PyList_CheckExact(kwarg_tensors) ||
        !PyTuple_CheckExact(appends) || PyTuple_GET_SIZE(appends) != MODULE_COLUMNS || !PyDict_CheckExact(interned))
        return PyLong_FromLong(-1);
    Py_ssize_t n = PyList_GET_SIZE(tensors), m = PyList_GET_SIZE(kwarg_tensors);
    if (n + m > MAX_TENSORS) return PyLong_FromLong(-1);
    int forward, forward_post, fact_of[MAX_TENSORS], n_facts = 0;
    HookIds which = hook_ids(argv[0], &forward, &forward_post);
    PyObject *wanted = PyObject_IsTrue(argv[8]) ? Py_True : Py_False; /* tensor_facts: a hook's wanted tensor */
    Facts facts[MAX_TENSORS];
    PyObject *result = NULL, *hook = NULL, *stage_id = NULL, *ids = NULL, *kwarg_ids = NULL;
    int ready = hook_facts(self, tensors, kwarg_tensors, wanted, facts, fact_of, &n_facts);
    if (ready <= 0) {
        if (ready == 0) result = PyLong_FromLong(-1);
        goto done;
    }
    if ((hook = hook_tuple(self, argv, forward, interned, &stage_id)) == NULL) goto done;
    /* Phase 2: the states, then the row. */
    long long seq = take_seq(self, argv[3]);
    if (seq < 0) goto done;
    for (int k = 0; k < n_facts; k++)
        if (!facts[k].known && write_state(self, &facts[k], seq) < 0) goto done;
    if ((ids = ids_tuple(facts, fact_of, 0, n)) == NULL || (kwarg_ids = ids_tuple(facts, fact_of, n, m)) == NULL)
        goto done;
    if (append_hook_row(self, argv, seq, stage_id, which, forward_post, ids, kwarg_ids, hook) == 0) {
        self->hooks_recorded++;
        result = PyLong_FromLongLong(seq);
    }
done:
    clear_facts(facts, n_facts);
    Py_XDECREF(hook);
    Py_XDECREF(stage_id);
    Py_XDECREF(ids);
    Py_XDECREF(kwarg_ids);
    return result;
}

/* describe(tensor, seq) -> the tensor_id of the tensor's current state, its row written when
 * the state is new, as TensorRegistry.describe(tensor, seq) gives it (neither written by an op
 * nor wanted: statistics at level "full" only); -1, nothing written, where the Python path
 * describes it (not a plain CPU tensor, an inference tensor). capture/context.py snapshot
 * describes a neuron's memories through it after each change. */
PyObject *OpRecorder_describe(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 2) {
        PyErr_SetString(PyExc_TypeError, "describe takes 2 arguments (tensor, seq)");
        return NULL;
    }
    long long seq = PyLong_AsLongLong(argv[1]);
    if (seq == -1 && PyErr_Occurred()) return NULL;
    if (!is_plain_tensor(self, argv[0])) return PyLong_FromLong(-1);
    Facts f = {.tensor = argv[0], .same_as = -1};
    PyObject *result = NULL;
    int ready = tensor_facts(self, &f, NULL, Py_False, -1, NULL);
    if (ready == 0) result = PyLong_FromLong(-1);
    else if (ready > 0 && (f.known || write_state(self, &f, seq) == 0)) result = PyLong_FromLongLong(f.tensor_id);
    clear_facts(&f, 1);
    return result;
}
