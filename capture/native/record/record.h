/* What the compiled per-op record's files share: the OpRecorder (record/recorder.c), a call's
 * tensor facts, the names it reads (record/reads.c) and what each file gives the others. */
#ifndef SPIKETRACE_RECORD_H
#define SPIKETRACE_RECORD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <structmember.h>

#include "native.h"
#include "record/attrs.h"
#include "record/interface.h"
#include "record/rules.h"

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
    PyObject *level; /* a Level: every state, the wanted operands only, none */
    /* Statistics kept on the device until flush: a device tensor's always, a CPU tensor's too
     * where `defer` is True (defer_statistics: a CPU run takes the device path). pend_row(t,
     * seq, stats) is TensorRegistry.pend_row: it takes them (stats None) or reuses a state's
     * pending ones, and notes the row just appended for the flush to fill. */
    PyObject *defer, *pend_row;
    PyObject *free_appends, *snapshot_memories, *event_seqs, *maybe_flush, *flush_rows;
    PyObject *context_key, *stage_tuple, *where_tuple; /* the last event's context key and its two tuples */
    /* The tracker generation (the object event_context last read) whose active stateful neurons
     * are the list held, the context's _active_stateful as read then: read once per change. */
    PyObject *stateful_seen, *stateful_list;
    long long recorded; /* events this object recorded (the rest went to the Python path) */
    long long hooks_recorded; /* module_events rows it wrote (record/hooks.c) */
    unsigned long thread_ident;           /* the thread whose index is cached */
    PyObject *thread_value;               /* its index */
    PyObject *scope_generation, *scope_value; /* the tracker generation whose scope id is cached */
    /* A state's row parts, keyed by what is cheap to hash (record/forms.c state_form): dtype
     * (a CPU state's) or (dtype, device) -> kind; (dtype, requires_grad, name[, device]) -> row
     * kind; (shape, stride, offset, id(row kind)) -> form. Created at first use, cleared with
     * their limits. */
    PyObject *state_kinds, *state_row_kinds, *state_forms;
} OpRecorder;

/* The names the record reads off Python objects, interned once (record/reads.c, which exports
 * them with the kind of object each is read from), and the constants it writes
 * (record/interface.c). */
extern PyObject *s_version, *s_shape, *s_requires_grad, *s_dtype, *s_device, *s_layout, *s_is_meta, *s_is_neg,
    *s_is_cpu, *s_storage_offset, *s_stride, *s_data_ptr, *s_untyped_storage, *s_nbytes, *s_steps_recorded,
    *s_step_index, *s_current_record, *s_current_stage, *s_stage_id, *s_name, *s_phase, *s_generation, *s_tracker,
    *s_stateful_generation, *s_active_stateful, *s_memory_snapshots, *s_memories, *s_catalog, *s_ids, *s_stateful,
    *s_active_modules, *s_recording, *s_training, *s_recompute_depth, *s_acquire, *s_release, *s_take, *s_value,
    *s_freed, *s_alpha;
extern PyObject *s_unlabeled, *s_empty_kwargs;
int native_intern_reads(PyObject *module); /* record/reads.c: interns them, exports ATTRIBUTE_READS */

/* What phase 1 learnt about one distinct tensor of the call. */
typedef struct {
    PyObject *tensor;       /* borrowed */
    PyObject *key;          /* id(tensor), new reference */
    PyObject *entry;        /* new reference (a large scan releases the GIL), or NULL */
    PyObject *shape;        /* new reference */
    PyObject *stats;        /* new reference: (nnz, is01) of a new state, DEFERRED or a PendingStats
                             * (statistics kept on the device), NULL for a known one */
    PyObject *form;         /* new reference, new states only */
    long long version, storage;
    int requires_grad, written, known, same_as; /* same_as: index of an earlier equal tensor, or -1 */
    long long tensor_id;
} Facts;

/* Output elements from which an op whose rule runs in Python is sent there: its scan would
 * cost more than the Python path does (benchmarks/capture_overhead.py compares them). */
#define PYTHON_RULE_FROM ((int64_t)1 << 17)

/* record/call.c: the parts of an event */
int call_append(PyObject *appends, Py_ssize_t i, PyObject *value);
int append_long(PyObject *appends, Py_ssize_t i, long long value);
int append_or_null(PyObject *appends, Py_ssize_t i, PyObject *value);
PyObject *argument_key(OpRecorder *self, PyObject *a);
PyObject *keyword_json(OpRecorder *self, PyObject *kwargs);
int is_plain_tensor(OpRecorder *self, PyObject *a);
Py_ssize_t tensor_list_length(OpRecorder *self, PyObject *a);
PyObject *out_list_json(OpRecorder *self, long long out_key);
PyObject *pack_fields(PyObject *const *values, Py_ssize_t n);

/* record/context.c: an event's context tuples and seq */
int event_context(OpRecorder *self, PyObject **stage_out, PyObject **where_out);
PyObject *current_thread(OpRecorder *self);
long long take_seq(OpRecorder *self, PyObject *record);

/* record/record.c: one op's rows (OpRecorder.record) */
PyObject *OpRecorder_record(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);

/* record/snapshots.c: what follows an event (neuron memory snapshots, the flush check) */
int after_event(OpRecorder *self, long long seq);

/* record/hooks.c: a module hook's row, and a tensor described alone */
PyObject *OpRecorder_module_event(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);
PyObject *OpRecorder_describe(OpRecorder *self, PyObject *const *argv, Py_ssize_t argc);

/* record/state.c: the tensor states of a call, and a described tensor's end */
void clear_facts(Facts *f, int n);
PyObject *fact_stats(Facts *facts, int k);
int tensor_facts(OpRecorder *self, Facts *f, PyObject *written_positions, PyObject *wanted_positions,
                 Py_ssize_t position, const Inheritance *inherit);
int write_state(OpRecorder *self, Facts *f, long long seq);
PyObject *OpRecorder_freed(OpRecorder *self, PyObject *ref);

/* record/forms.c: phase 1 for a tensor whose state is new (1 ready, 0 Python's, -1 error) */
/* A new state's statistics to take on its device at write (record/state.c write_state): a
 * marker no statistics tuple or PendingStats can be. */
#define DEFERRED Py_Ellipsis
int new_state(OpRecorder *self, Facts *f, int python_if_scanned);

/* record/counter.c: take a Counter's value and advance it (-1 with an exception set), or read
 * it (a new reference) */
long long counter_take(PyObject *counter);
PyObject *counter_value(PyObject *counter);

#endif
