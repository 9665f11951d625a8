/* What the compiled per-op record's files share (capture/native/_native_record.c and the files it
 * calls: _native_call.c, the parts of an event; _native_state.c, the tensor states). */
#ifndef SPIKETRACE_NATIVE_RECORD_H
#define SPIKETRACE_NATIVE_RECORD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "_native.h"
#include "_native_attrs.h"
#include "_native_rules.h"
#include <math.h>
#include <stddef.h>
#include <structmember.h>
#include <stdint.h>

/* capture/native/_native.c */
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
    PyObject *entries, *refs, *freed, *kinds, *make_kind, *parameter_names;
    PyObject *interned_args, *placeholders_json, *arg_slots, *out_slot, *out_jsons;
    PyObject *out_item_slots, *out_list_json, *out_list_jsons; /* a tuple or list out: slots, JSON maker, its cache */
    PyObject *interned_kwargs, *kwargs_json, *kwarg_types; /* keyword arguments without tensors */
    PyObject *tensor_marker, *float_marker, *ints_marker, *bool_marker, *skipped;
    PyObject *tensors_marker, *list_slots; /* a tensor list's key head; list_slots[position][item] */
    PyObject *calls, *wheres, *tensor_type, *parameter_type, *strided, *bit_formats;
    PyObject *is_grad_enabled, *graph_task_id, *in_recomputation, *dispatch_depth;
    PyObject *thread_index, *scope_id, *storage_pointer;
    PyObject *seq_counter, *tensor_ids, *uids; /* the context's and the registry's Counters */
    PyObject *level; /* 2 full (every state), 1 synaptic (wanted operands only), 0 none */
    PyObject *free_appends, *snapshot_memories, *event_seqs, *maybe_flush, *flush_rows;
    PyObject *context_key, *stage_tuple, *where_tuple; /* the last event's context key and its two tuples */
    /* The tracker generation (the object event_context last read) whose active stateful neurons
     * are the list held, the context's _active_stateful as read then: read once per change. */
    PyObject *stateful_seen, *stateful_list;
    long long recorded; /* events this object recorded (the rest went to the Python path) */
    long long hooks_recorded; /* module_events rows it wrote (capture/native/_native_hooks.c) */
    unsigned long thread_ident;           /* the thread whose index is cached */
    PyObject *thread_value;               /* its index */
    PyObject *scope_generation, *scope_value; /* the tracker generation whose scope id is cached */
    /* A CPU state's row parts, keyed by what is cheap to hash (capture/native/_native_state.c
     * cpu_form): dtype -> kind; (dtype, requires_grad, name) -> row kind; (shape, stride,
     * offset, id(row kind)) -> form. Created at first use, cleared with their limits. */
    PyObject *cpu_kinds, *cpu_row_kinds, *cpu_forms;
} OpRecorder;

/* Attribute and method names, interned once (native_add_record_type). */
extern PyObject *s_version, *s_shape, *s_requires_grad, *s_dtype, *s_device, *s_layout, *s_is_meta, *s_is_neg,
    *s_is_cpu, *s_storage_offset, *s_stride, *s_data_ptr, *s_untyped_storage, *s_nbytes, *s_steps_recorded, *s_step_index,
    *s_current_record, *s_current_stage, *s_stage_id, *s_name, *s_phase,
    *s_unlabeled, *s_empty_kwargs, *s_written_positions, *s_generation, *s_tracker, *s_stateful_generation, *s_active_stateful,
    *s_memory_snapshots, *s_memories, *s_catalog, *s_ids, *s_stateful, *s_active_modules;

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

/* _native_call.c: the parts of an event */
int call_append(PyObject *appends, Py_ssize_t i, PyObject *value);
int append_long(PyObject *appends, Py_ssize_t i, long long value);
int append_or_null(PyObject *appends, Py_ssize_t i, PyObject *value);
PyObject *argument_key(OpRecorder *self, PyObject *a);
PyObject *keyword_json(OpRecorder *self, PyObject *kwargs);
int is_plain_tensor(OpRecorder *self, PyObject *a);
Py_ssize_t tensor_list_length(OpRecorder *self, PyObject *a);
int event_context(OpRecorder *self, PyObject **stage_out, PyObject **where_out);
PyObject *current_thread(OpRecorder *self);
long long take_seq(OpRecorder *self, PyObject *record);

/* _native_record.c: one op's rows (OpRecorder.record) */
PyObject *OpRecorder_record(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);

/* _native_hooks.c: a module hook's row */
PyObject *OpRecorder_module_event(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);
PyObject *OpRecorder_describe(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);
PyObject *out_list_json(OpRecorder *self, long long out_key);

/* _native_state.c: the tensor states */
void clear_facts(Facts *f, int n);
PyObject *fact_stats(Facts *facts, int k);
int tensor_facts(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
                 Py_ssize_t position, const Inheritance *inherit);
int write_state(OpRecorder *self, Facts *f, long long seq);

#endif
