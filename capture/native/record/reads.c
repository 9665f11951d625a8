/* The names the compiled record reads off Python objects, each interned once, with the kind of
 * object it reads it from.
 *
 * Every attribute or method the record reads by name is one row of READS (it reads none by
 * any other string), so a name the Python side renames cannot go unnoticed: the module exports
 * the rows as ATTRIBUTE_READS, ((owner, name), ...), and tests/test_native_layout.py checks
 * each name on a real object of its owner (a RecordingContext, its catalog and tracker, a
 * Stage, a module, a neuron, a tensor and its storage, ...). Most are the documented public
 * fields of those objects; the context's three underscored ones are the state
 * RecordingContext.snapshot_memories keeps, which the record reads and rebuilds as it does,
 * `_version` is torch's own version counter and `_memories` SpikingJelly's neuron state. */
#include "record/record.h"

PyObject *s_version, *s_shape, *s_requires_grad, *s_dtype, *s_device, *s_layout, *s_is_meta, *s_is_neg, *s_is_cpu,
    *s_storage_offset, *s_stride, *s_data_ptr, *s_untyped_storage, *s_nbytes, *s_steps_recorded, *s_step_index,
    *s_current_record, *s_current_stage, *s_stage_id, *s_name, *s_phase, *s_generation, *s_tracker,
    *s_stateful_generation, *s_active_stateful, *s_memory_snapshots, *s_memories, *s_catalog, *s_ids, *s_stateful,
    *s_active_modules, *s_recording, *s_training, *s_recompute_depth, *s_acquire, *s_release, *s_take, *s_value,
    *s_freed, *s_alpha;

static const struct {
    PyObject **target;
    const char *owner, *name;
} READS[] = {
    /* a plain tensor (record/attrs.c reads the attributes through torch's getters) */
    {&s_version, "tensor", "_version"}, {&s_shape, "tensor", "shape"}, {&s_requires_grad, "tensor", "requires_grad"},
    {&s_dtype, "tensor", "dtype"}, {&s_device, "tensor", "device"}, {&s_layout, "tensor", "layout"},
    {&s_is_meta, "tensor", "is_meta"}, {&s_is_cpu, "tensor", "is_cpu"}, {&s_is_neg, "tensor", "is_neg"},
    {&s_storage_offset, "tensor", "storage_offset"}, {&s_stride, "tensor", "stride"},
    {&s_data_ptr, "tensor", "data_ptr"}, {&s_untyped_storage, "tensor", "untyped_storage"},
    /* its untyped storage (record/forms.c storage_holds) */
    {&s_data_ptr, "storage", "data_ptr"}, {&s_nbytes, "storage", "nbytes"},
    /* the RecordingContext (capture/context.py) */
    {&s_recording, "context", "recording"}, {&s_steps_recorded, "context", "steps_recorded"},
    {&s_step_index, "context", "step_index"}, {&s_current_record, "context", "current_record"},
    {&s_current_stage, "context", "current_stage"}, {&s_tracker, "context", "tracker"},
    {&s_catalog, "context", "catalog"}, {&s_stateful_generation, "context", "_stateful_generation"},
    {&s_active_stateful, "context", "_active_stateful"}, {&s_memory_snapshots, "context", "_memory_snapshots"},
    /* its ModuleCatalog, ScopeTracker and current Stage */
    {&s_ids, "catalog", "ids"}, {&s_stateful, "catalog", "stateful"},
    {&s_generation, "tracker", "generation"}, {&s_active_modules, "tracker", "active_modules"},
    {&s_recompute_depth, "tracker", "recompute_depth"},
    {&s_stage_id, "stage", "stage_id"}, {&s_name, "stage", "name"}, {&s_phase, "stage", "phase"},
    /* a hooked module, and an active stateful neuron (catalog.py marks those holding _memories) */
    {&s_training, "module", "training"}, {&s_memories, "neuron", "_memories"},
    /* the context's lock, a Python counter (capture/native/counters.py), the OpRecorder itself */
    {&s_acquire, "lock", "acquire"}, {&s_release, "lock", "release"},
    {&s_take, "counter", "take"}, {&s_value, "counter", "value"}, {&s_freed, "recorder", "freed"},
    /* a keyword argument of add, sub and rsub (record/rules.c) */
    {&s_alpha, "keyword", "alpha"},
};
#define N_READS (sizeof(READS) / sizeof(READS[0]))

int native_intern_reads(PyObject *module) {
    PyObject *reads = PyTuple_New(N_READS);
    if (reads == NULL) return -1;
    for (size_t i = 0; i < N_READS; i++) {
        PyObject *name = PyUnicode_InternFromString(READS[i].name);
        PyObject *row = name != NULL ? Py_BuildValue("(sO)", READS[i].owner, name) : NULL;
        if (row == NULL) {
            Py_XDECREF(name);
            Py_DECREF(reads);
            return -1;
        }
        PyTuple_SET_ITEM(reads, i, row);
        Py_XSETREF(*READS[i].target, name); /* a name read from two owners is one interned string */
    }
    return PyModule_AddObject(module, "ATTRIBUTE_READS", reads) < 0 ? (Py_DECREF(reads), -1) : 0;
}
