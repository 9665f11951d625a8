/* The recording mode's __torch_dispatch__ for the common call, in C (capture/ops/dispatch.py).
 *
 * A Python __torch_dispatch__ costs a Python frame and its body on every op, a large part of
 * a small op's recorded cost (benchmarks/capture_overhead.py measures it). This handler is the
 * mode's instance attribute (torch calls `mode.__torch_dispatch__` and checks that its
 * __self__ is the mode); it takes the calls whose op has a compiled plan
 * (OpLog.compiled: a plain OpOverload, no decomposition, no collective) and hands every
 * other call to the Python handler unchanged. For the calls it takes it does what the Python
 * handler does, in the same order: the eval-frame callback off (TorchDynamo never sees the
 * record), the op, then under the context's lock the compiled record, the per-op scalars or
 * the Python record where the compiled one declines, a capture failure reported, never
 * raised; the op's result returned. */
#include "record/record.h"

typedef struct {
    PyObject_HEAD
    PyObject *mode;           /* __self__ */
    PyObject *recorder;       /* the OpRecorder */
    PyObject *compiled;       /* id(func) -> a tuple of COMPILED_PLAN_FIELDS (interface.h PlanField) */
    PyObject *context;        /* its `recording` is read per call */
    PyObject *acquire, *release; /* the context lock's bound methods */
    PyObject *set_eval_frame; /* TorchDynamo's switch, or None */
    PyObject *in_python;      /* the mode's Python handler, bound */
    PyObject *take_scalars;   /* OpScalars.take(name, seq, args, out) */
    PyObject *record_in_python; /* OpLog.record_in_python(plan, func, args, kwargs, out) */
    PyObject *report;         /* report(func, exc): a capture failure, counted */
    PyObject *empty_kwargs;   /* {} for a call without keyword arguments (never written to) */
    long long taken;          /* calls this handler took (the rest went to the Python handler) */
    vectorcallfunc vectorcall;
} DispatchHandler;

/* The raised exception, taken out of the error indicator (PyErr_GetRaisedException before 3.12). */
static PyObject *take_exception(void) {
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL) return NULL;
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL) PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

/* An exception held across a call that must run anyway (the lock's release, the eval-frame
 * callback's restore), then raised again as it was. */
typedef struct {
    PyObject *type, *value, *traceback;
} Pending;

static Pending hold_exception(void) {
    Pending p;
    PyErr_Fetch(&p.type, &p.value, &p.traceback);
    return p;
}

#define N_HANDLER_FIELDS 12
#define HANDLER_SLOT(self, i) (&(self)->mode + (i))

/* A capture failure: reported through Python; an exception that is not an Exception
 * (KeyboardInterrupt, SystemExit) stays raised, as the Python handler's `except Exception`. */
static int report_failure(DispatchHandler *self, PyObject *func) {
    if (!PyErr_ExceptionMatches(PyExc_Exception)) return -1;
    PyObject *exc = take_exception();
    PyObject *r = PyObject_CallFunctionObjArgs(self->report, func, exc, NULL);
    Py_DECREF(exc);
    if (r == NULL) return -1;
    Py_DECREF(r);
    return 0;
}

/* The record of one call already run: compiled, then scalars or the Python record. */
static int record_call(DispatchHandler *self, PyObject *func, PyObject *plan, PyObject *args, PyObject *kwargs,
                       PyObject *out) {
    PyObject *argv[7] = {PyTuple_GET_ITEM(plan, PLAN_NAME), PyTuple_GET_ITEM(plan, PLAN_WRITTEN),
                         PyTuple_GET_ITEM(plan, PLAN_WANTED), PyTuple_GET_ITEM(plan, PLAN_PROPAGATION), args, kwargs,
                         out};
    PyObject *seq = OpRecorder_record((OpRecorder *)self->recorder, argv, 7);
    if (seq == NULL) return report_failure(self, func);
    long long value = PyLong_AsLongLong(seq);
    Py_DECREF(seq);
    if (value == -1 && PyErr_Occurred()) return report_failure(self, func);
    PyObject *r;
    if (value < 0) {
        r = PyObject_CallFunctionObjArgs(self->record_in_python, PyTuple_GET_ITEM(plan, PLAN_PLAN), func, args, kwargs,
                                         out, NULL);
    } else if (PyTuple_GET_ITEM(plan, PLAN_STATISTICS) == Py_True) {
        PyObject *seq_object = PyLong_FromLongLong(value);
        if (seq_object == NULL) return report_failure(self, func);
        r = PyObject_CallFunctionObjArgs(self->take_scalars, PyTuple_GET_ITEM(plan, PLAN_NAME), seq_object, args, out,
                                         NULL);
        Py_DECREF(seq_object);
    } else {
        return 0;
    }
    if (r == NULL) return report_failure(self, func);
    Py_DECREF(r);
    return 0;
}

/* The record of a call already run while recording is on, under the context's lock (released
 * whatever happened, a raised exception kept across the release): 0, or -1 with an exception
 * set. */
static int record_locked(DispatchHandler *self, PyObject *func, PyObject *plan, PyObject *args, PyObject *kwargs,
                         PyObject *out) {
    PyObject *held = PyObject_CallNoArgs(self->acquire);
    if (held == NULL) return -1;
    Py_DECREF(held);
    int failed = record_call(self, func, plan, args, kwargs, out);
    Pending pending = {NULL, NULL, NULL};
    if (failed) pending = hold_exception();
    PyObject *released = PyObject_CallNoArgs(self->release);
    if (failed) {
        Py_XDECREF(released);
        PyErr_Restore(pending.type, pending.value, pending.traceback);
        return -1;
    }
    if (released == NULL) return -1;
    Py_DECREF(released);
    self->taken++;
    return 0;
}

static PyObject *DispatchHandler_vectorcall(DispatchHandler *self, PyObject *const *argv, size_t nargsf,
                                            PyObject *kwnames) {
    Py_ssize_t argc = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || argc < 3 || argc > 4 || !PyTuple_CheckExact(argv[2]))
        return PyObject_Vectorcall(self->in_python, argv, nargsf, kwnames);
    PyObject *func = argv[0], *args = argv[2];
    PyObject *kwargs = argc == 4 ? argv[3] : Py_None;
    if (kwargs == Py_None) kwargs = self->empty_kwargs;
    else if (!PyDict_CheckExact(kwargs)) return PyObject_Vectorcall(self->in_python, argv, nargsf, kwnames);

    PyObject *key = PyLong_FromVoidPtr(func);
    if (key == NULL) return NULL;
    PyObject *plan = PyDict_GetItemWithError(self->compiled, key); /* borrowed */
    Py_DECREF(key);
    if (plan == NULL && PyErr_Occurred()) return NULL;
    if (plan == NULL || !PyTuple_CheckExact(plan) || PyTuple_GET_SIZE(plan) != PLAN_FIELDS)
        return PyObject_Vectorcall(self->in_python, argv, nargsf, kwnames); /* a new op, or one Python takes */
    Py_INCREF(plan); /* the record may run Python, which may change the table */
    PyObject *frame = NULL, *out = NULL;
    if (self->set_eval_frame != Py_None) {
        frame = PyObject_CallOneArg(self->set_eval_frame, Py_None);
        if (frame == NULL) goto done;
    }
    out = PyObject_Call(PyTuple_GET_ITEM(plan, PLAN_OP), args, PyDict_GET_SIZE(kwargs) ? kwargs : NULL);
    if (out == NULL) goto done; /* the user's op: its own errors are the user's, raised as ever */

    PyObject *recording = PyObject_GetAttr(self->context, s_recording);
    if (recording == NULL) goto fail;
    int on = PyObject_IsTrue(recording);
    Py_DECREF(recording);
    if (on < 0 || (on && record_locked(self, func, plan, args, kwargs, out) < 0)) goto fail;
    goto done;
fail:
    Py_CLEAR(out);
done:
    if (frame != NULL) {
        int raised = PyErr_Occurred() != NULL;
        Pending pending = hold_exception();
        PyObject *restored = PyObject_CallOneArg(self->set_eval_frame, frame);
        Py_DECREF(frame);
        if (raised) {
            Py_XDECREF(restored);
            PyErr_Restore(pending.type, pending.value, pending.traceback);
        } else if (restored == NULL) {
            Py_CLEAR(out);
        } else {
            Py_DECREF(restored);
        }
    }
    Py_DECREF(plan);
    return out;
}

static int DispatchHandler_init(DispatchHandler *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"mode", "recorder", "compiled", "context", "lock", "set_eval_frame", "in_python",
                            "take_scalars", "record_in_python", "report", NULL};
    PyObject *mode, *recorder, *compiled, *context, *lock, *set_eval_frame, *in_python, *take_scalars,
        *record_in_python, *report;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OOO!OOOOOOO", names, &mode, &recorder, &PyDict_Type, &compiled,
                                     &context, &lock, &set_eval_frame, &in_python, &take_scalars, &record_in_python,
                                     &report))
        return -1;
    if (strcmp(Py_TYPE(recorder)->tp_name, "spiketrace.capture.native._native.OpRecorder") != 0) {
        PyErr_SetString(PyExc_TypeError, "DispatchHandler: recorder must be a spiketrace.capture.native._native.OpRecorder");
        return -1;
    }
    PyObject *acquire = PyObject_GetAttr(lock, s_acquire);
    PyObject *release = acquire ? PyObject_GetAttr(lock, s_release) : NULL;
    PyObject *empty = release ? PyDict_New() : NULL;
    if (empty == NULL) {
        Py_XDECREF(acquire);
        Py_XDECREF(release);
        return -1;
    }
    PyObject *values[N_HANDLER_FIELDS] = {mode, recorder, compiled, context, acquire, release, set_eval_frame,
                                          in_python, take_scalars, record_in_python, report, empty};
    for (int i = 0; i < N_HANDLER_FIELDS; i++) {
        PyObject *old = *HANDLER_SLOT(self, i);
        if (i != 4 && i != 5 && i != 11) Py_INCREF(values[i]); /* the new references are kept as they are */
        *HANDLER_SLOT(self, i) = values[i];
        Py_XDECREF(old);
    }
    self->vectorcall = (vectorcallfunc)DispatchHandler_vectorcall;
    return 0;
}

static int DispatchHandler_traverse(DispatchHandler *self, visitproc visit, void *arg) {
    for (int i = 0; i < N_HANDLER_FIELDS; i++) Py_VISIT(*HANDLER_SLOT(self, i));
    return 0;
}

static int DispatchHandler_clear(DispatchHandler *self) {
    for (int i = 0; i < N_HANDLER_FIELDS; i++) Py_CLEAR(*HANDLER_SLOT(self, i));
    return 0;
}

static void DispatchHandler_dealloc(DispatchHandler *self) {
    PyObject_GC_UnTrack(self);
    DispatchHandler_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef DispatchHandler_members[] = {
    {"__self__", T_OBJECT, offsetof(DispatchHandler, mode), READONLY, "the mode this handler belongs to"},
    {"taken", T_LONGLONG, offsetof(DispatchHandler, taken), READONLY, "calls recorded through this handler"},
    {NULL, 0, 0, 0, NULL},
};

PyTypeObject DispatchHandlerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "spiketrace.capture.native._native.DispatchHandler",
    .tp_basicsize = sizeof(DispatchHandler),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "RecordingMode.__torch_dispatch__ for ops with a compiled plan (capture/ops/dispatch.py).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)DispatchHandler_init,
    .tp_traverse = (traverseproc)DispatchHandler_traverse,
    .tp_clear = (inquiry)DispatchHandler_clear,
    .tp_dealloc = (destructor)DispatchHandler_dealloc,
    .tp_members = DispatchHandler_members,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(DispatchHandler, vectorcall),
};
