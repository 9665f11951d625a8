/* What the compiled record shares with the Python it mirrors, defined here once.
 *
 * Each enum below is the C side of a number or an order the Python side also uses. The
 * module exports them (record/interface.c: the numbers as int constants, each order as a tuple
 * of names in its enum's order), capture/ops/native_record.py binds the record through those
 * exports (its constants, and each append tuple bound by column name), and
 * tests/test_native_layout.py holds every export equal to the Python definition it mirrors.
 */
#ifndef SPIKETRACE_RECORD_INTERFACE_H
#define SPIKETRACE_RECORD_INTERFACE_H

/* The tensors one call may hold (operands, tensor list items and outputs), and its positional
 * arguments (capture/ops/arguments.py _ARG_SLOTS has one slot each). */
#define MAX_TENSORS 32
#define MAX_ARGS 32

/* How the record meets an op's propagation rule (capture/tensors/propagation.py), as
 * OpPlan.native_propagation tells it (capture/ops/native_record.py compiled_propagation). */
typedef enum {
    PROPAGATE_NONE = 0,        /* no rule: a new output state is scanned */
    PROPAGATE_SAME = 1,        /* same_elements: the output holds its first operand's elements */
    PROPAGATE_PYTHON = 2,      /* a rule the Python path applies: a large output goes there */
    PROPAGATE_ADD = 3,         /* arithmetic(add): x + 0, or an all-zero tensor operand */
    PROPAGATE_MUL = 4,         /* arithmetic(mul): x * 1 here; a 0/1 x times a number in Python */
    PROPAGATE_DIV = 5,         /* arithmetic(div): x / 1 */
    PROPAGATE_BINARY_CAST = 6, /* binary_cast: a 0/1 operand keeps its statistics through a cast */
    PROPAGATE_NEGATE = 7,      /* negated: -x has x's nonzeros, and is 0/1 only when all zero */
    PROPAGATE_SUB = 8,         /* arithmetic(sub): x - 0, or an all-zero tensor operand */
    PROPAGATE_ONE_MINUS = 9,   /* one_minus_binary: 1 - x of a 0/1 x */
    PROPAGATE_CONCAT = 10,     /* concatenated: cat and stack hold their parts' elements */
    PROPAGATIONS
} Propagation;

/* The statistics level (schemas/statistics_levels.py LEVELS, in its order). */
typedef enum { LEVEL_NONE, LEVEL_SYNAPTIC, LEVEL_FULL, LEVELS } Level;

/* The columns of each buffer the record appends to, in the order of the bound appends it is
 * given: events (capture/ops/dispatch.py _EVENT_COLUMNS); event_tensors (its run's seq and
 * length, capture/store/table_buffer.py BUFFER_RUNS, then _USE_COLUMNS); tensors
 * (capture/tensors/registry.py ROW_COLUMNS); tensor_frees; module_events
 * (capture/modules/module_events.py _COLUMNS). */
typedef enum { EVENT_SEQ, EVENT_CALL, EVENT_STAGE, EVENT_WHERE, EVENT_COLUMNS } EventColumn;
typedef enum { USE_RUN_SEQ, USE_RUN_LENGTH, USE_SLOT, USE_TENSOR_ID, USE_COLUMNS } UseColumn;
typedef enum {
    ROW_TENSOR_ID, ROW_UID, ROW_VERSION, ROW_FIRST_SEQ, ROW_FORM, ROW_STORAGE, ROW_NNZ, ROW_IS01, ROW_COLUMNS
} RowColumn;
typedef enum { FREE_UID, FREE_SEQ, FREE_COLUMNS } FreeColumn;
typedef enum {
    MODULE_SEQ, MODULE_CALL_INDEX, MODULE_STEP, MODULE_STAGE_ID, MODULE_INPUTS, MODULE_OUTPUTS, MODULE_KWARG_INPUTS,
    MODULE_HOOK, MODULE_COLUMNS
} ModuleEventColumn;

/* The members of the interned tuples the record writes (table_buffer.py BUFFER_GROUPS): an
 * event's $stage and $where, a hook's $hook, a tensor row's $form. A form ends with its row
 * kind (FORM_DTYPE on), whose first KIND_FIELDS members are the registry's kind_of(t). */
typedef enum { STAGE_STEP, STAGE_ID, STAGE_NAME, STAGE_PHASE, STAGE_FIELDS } StageField;
typedef enum { WHERE_GRAD, WHERE_BACKWARD, WHERE_THREAD, WHERE_SCOPE, WHERE_RECOMPUTE, WHERE_FIELDS } WhereField;
typedef enum {
    HOOK_KIND, HOOK_MODULE_ID, HOOK_TRACKER_NAME, HOOK_STAGE, HOOK_PHASE, HOOK_GRAD, HOOK_TRAINING, HOOK_THREAD,
    HOOK_INPUTS_REQUIRE_GRAD, HOOK_RECOMPUTE, HOOK_FIELDS
} HookField;
typedef enum {
    FORM_SHAPE, FORM_STRIDE, FORM_OFFSET, FORM_NUMEL, FORM_NESTED_SHAPES, FORM_DTYPE, FORM_ELEMENT_SIZE, FORM_DEVICE,
    FORM_REQUIRES_GRAD, FORM_IS_META, FORM_IS_PARAMETER, FORM_PARAMETER, FORM_FIELDS
} FormField;
#define ROW_KIND_FIELDS (FORM_FIELDS - FORM_DTYPE)
#define KIND_FIELDS 3

/* The hook kinds whose row holds the ids in `inputs` (forward_pre, backward_post) and in
 * `outputs` (forward_post, backward_pre): module_events.py _INPUT_KINDS, _OUTPUT_KINDS. */
#define HOOK_FORWARD_PRE "forward_pre"
#define HOOK_FORWARD_POST "forward_post"
#define HOOK_BACKWARD_PRE "backward_pre"
#define HOOK_BACKWARD_POST "backward_post"

/* A registry entry (TensorRegistry.entries' lists) and a bit format (capture/native/__init__.py
 * BitFormat). */
typedef enum {
    ENTRY_UID, ENTRY_VERSION, ENTRY_TENSOR_ID, ENTRY_SHAPE, ENTRY_REF, ENTRY_STATS, ENTRY_REQUIRES_GRAD, ENTRY_FIELDS
} EntryField;
typedef enum { FORMAT_ELEMENT_SIZE, FORMAT_ZERO_MASK, FORMAT_ONE_BITS, FORMAT_BINARY_TYPE, FORMAT_FIELDS } FormatField;

/* What capture/ops/dispatch.py's OpLog.compiled holds for an op the compiled handler
 * (record/dispatch.c) takes: its OpPlan, the op's C entry point, then record()'s name, written
 * and wanted positions and propagation, and whether the op has per-op scalars. */
typedef enum {
    PLAN_PLAN, PLAN_OP, PLAN_NAME, PLAN_WRITTEN, PLAN_WANTED, PLAN_PROPAGATION, PLAN_STATISTICS, PLAN_FIELDS
} PlanField;

/* A tuple or list out's key, as capture/ops/arguments.py out_list_json unpacks it: the first
 * tensor's placeholder index below bit 8, the item count from bit 8, a bit per tensor item from
 * bit 16. */
#define OUT_KEY_ITEMS_SHIFT 8
#define OUT_KEY_PRESENT_SHIFT 16

/* null in the nnz and is01 columns (table_buffer.py NULL_SENTINELS), and the entries an
 * interning table keeps before it starts over (table_buffer.py INTERNED_PER_GROUP). */
#define NULL_SENTINEL (-1)
#define INTERNED_LIMIT 65536

#endif
