/* The module's exports of record/interface.h: each number as an int constant, each order as a
 * tuple of names in its enum's order (each name placed by its enum member, so the C's index of a
 * column and the name exported for it are one definition), the strings the record writes, and
 * the names it reads (record/reads.c). capture/ops/native_record.py binds the record through
 * them; tests/test_native_layout.py holds them equal to the Python definitions they mirror. */
#include "record/record.h"

PyObject *s_unlabeled, *s_empty_kwargs;

#define NAMED(member) [member] = #member

static const char *const PROPAGATION_NAMES[PROPAGATIONS] = {
    NAMED(PROPAGATE_NONE), NAMED(PROPAGATE_SAME),        NAMED(PROPAGATE_PYTHON), NAMED(PROPAGATE_ADD),
    NAMED(PROPAGATE_MUL),  NAMED(PROPAGATE_DIV),         NAMED(PROPAGATE_BINARY_CAST), NAMED(PROPAGATE_NEGATE),
    NAMED(PROPAGATE_SUB),  NAMED(PROPAGATE_ONE_MINUS),   NAMED(PROPAGATE_CONCAT),
};
static const char *const LEVEL_NAMES[LEVELS] = {[LEVEL_NONE] = "none", [LEVEL_SYNAPTIC] = "synaptic",
                                                [LEVEL_FULL] = "full"};
static const char *const EVENT_NAMES[EVENT_COLUMNS] = {[EVENT_SEQ] = "seq", [EVENT_CALL] = "$call",
                                                       [EVENT_STAGE] = "$stage", [EVENT_WHERE] = "$where"};
static const char *const USE_NAMES[USE_COLUMNS] = {[USE_RUN_SEQ] = "seq", [USE_RUN_LENGTH] = "k",
                                                   [USE_SLOT] = "$slot", [USE_TENSOR_ID] = "tensor_id"};
static const char *const ROW_NAMES[ROW_COLUMNS] = {
    [ROW_TENSOR_ID] = "tensor_id", [ROW_UID] = "uid",          [ROW_VERSION] = "version",
    [ROW_FIRST_SEQ] = "first_seq", [ROW_FORM] = "$form",        [ROW_STORAGE] = "storage_ptr",
    [ROW_NNZ] = "nnz",             [ROW_IS01] = "is01",
};
static const char *const FREE_NAMES[FREE_COLUMNS] = {[FREE_UID] = "uid", [FREE_SEQ] = "freed_seq"};
static const char *const MODULE_NAMES[MODULE_COLUMNS] = {
    [MODULE_SEQ] = "seq",       [MODULE_CALL_INDEX] = "call_index", [MODULE_STEP] = "step",
    [MODULE_STAGE_ID] = "stage_id", [MODULE_INPUTS] = "inputs",    [MODULE_OUTPUTS] = "outputs",
    [MODULE_KWARG_INPUTS] = "kwarg_inputs", [MODULE_HOOK] = "$hook",
};
static const char *const STAGE_NAMES[STAGE_FIELDS] = {[STAGE_STEP] = "step", [STAGE_ID] = "stage_id",
                                                      [STAGE_NAME] = "stage", [STAGE_PHASE] = "phase"};
static const char *const WHERE_NAMES[WHERE_FIELDS] = {[WHERE_GRAD] = "grad_enabled", [WHERE_BACKWARD] = "in_backward",
                                                      [WHERE_THREAD] = "thread", [WHERE_SCOPE] = "scope_id",
                                                      [WHERE_RECOMPUTE] = "recompute"};
static const char *const HOOK_NAMES[HOOK_FIELDS] = {
    [HOOK_KIND] = "kind",       [HOOK_MODULE_ID] = "module_id", [HOOK_TRACKER_NAME] = "tracker_name",
    [HOOK_STAGE] = "stage",     [HOOK_PHASE] = "phase",         [HOOK_GRAD] = "grad_enabled",
    [HOOK_TRAINING] = "training", [HOOK_THREAD] = "thread",     [HOOK_INPUTS_REQUIRE_GRAD] = "inputs_require_grad",
    [HOOK_RECOMPUTE] = "recompute",
};
static const char *const FORM_NAMES[FORM_FIELDS] = {
    [FORM_SHAPE] = "shape",     [FORM_STRIDE] = "stride",           [FORM_OFFSET] = "storage_offset",
    [FORM_NUMEL] = "numel",     [FORM_NESTED_SHAPES] = "nested_shapes", [FORM_DTYPE] = "dtype",
    [FORM_ELEMENT_SIZE] = "element_size", [FORM_DEVICE] = "device", [FORM_REQUIRES_GRAD] = "requires_grad",
    [FORM_IS_META] = "is_meta", [FORM_IS_PARAMETER] = "is_parameter", [FORM_PARAMETER] = "parameter",
};
static const char *const ENTRY_NAMES[ENTRY_FIELDS] = {
    [ENTRY_UID] = "uid",     [ENTRY_VERSION] = "version", [ENTRY_TENSOR_ID] = "tensor_id",
    [ENTRY_SHAPE] = "shape", [ENTRY_REF] = "ref",         [ENTRY_STATS] = "stats",
    [ENTRY_REQUIRES_GRAD] = "requires_grad",
};
static const char *const FORMAT_NAMES[FORMAT_FIELDS] = {
    [FORMAT_ELEMENT_SIZE] = "element_size", [FORMAT_ZERO_MASK] = "zero_mask", [FORMAT_ONE_BITS] = "one_bits",
    [FORMAT_BINARY_TYPE] = "binary_type"};
static const char *const PLAN_NAMES[PLAN_FIELDS] = {
    [PLAN_PLAN] = "plan",       [PLAN_OP] = "op",         [PLAN_NAME] = "name",
    [PLAN_WRITTEN] = "written_positions", [PLAN_WANTED] = "wanted", [PLAN_PROPAGATION] = "propagation",
    [PLAN_STATISTICS] = "statistics",
};
static const char *const INPUT_KINDS[] = {HOOK_FORWARD_PRE, HOOK_BACKWARD_POST};
static const char *const OUTPUT_KINDS[] = {HOOK_FORWARD_POST, HOOK_BACKWARD_PRE};

static const struct {
    const char *export;
    const char *const *names;
    int count;
} ORDERS[] = {
    {"LEVELS", LEVEL_NAMES, LEVELS},
    {"EVENT_COLUMNS", EVENT_NAMES, EVENT_COLUMNS},
    {"USE_COLUMNS", USE_NAMES, USE_COLUMNS},
    {"ROW_COLUMNS", ROW_NAMES, ROW_COLUMNS},
    {"FREE_COLUMNS", FREE_NAMES, FREE_COLUMNS},
    {"MODULE_EVENT_COLUMNS", MODULE_NAMES, MODULE_COLUMNS},
    {"STAGE_FIELDS", STAGE_NAMES, STAGE_FIELDS},
    {"WHERE_FIELDS", WHERE_NAMES, WHERE_FIELDS},
    {"HOOK_FIELDS", HOOK_NAMES, HOOK_FIELDS},
    {"FORM_FIELDS", FORM_NAMES, FORM_FIELDS},
    {"ENTRY_FIELDS", ENTRY_NAMES, ENTRY_FIELDS},
    {"BIT_FORMAT_FIELDS", FORMAT_NAMES, FORMAT_FIELDS},
    {"COMPILED_PLAN_FIELDS", PLAN_NAMES, PLAN_FIELDS},
    {"HOOK_INPUT_KINDS", INPUT_KINDS, 2},
    {"HOOK_OUTPUT_KINDS", OUTPUT_KINDS, 2},
};

static const struct {
    const char *name;
    long value;
} NUMBERS[] = {
    {"MAX_TENSORS", MAX_TENSORS},
    {"MAX_ARGS", MAX_ARGS},
    {"NULL_SENTINEL", NULL_SENTINEL},
    {"INTERNED_LIMIT", INTERNED_LIMIT},
    {"OUT_KEY_ITEMS_SHIFT", OUT_KEY_ITEMS_SHIFT},
    {"OUT_KEY_PRESENT_SHIFT", OUT_KEY_PRESENT_SHIFT},
};

/* names[0..count) as a tuple, added as `export`: 0, or -1 with an exception set (a member its
 * enum has and the names do not is a SystemError at import). */
static int add_names(PyObject *module, const char *export, const char *const *names, int count) {
    PyObject *tuple = PyTuple_New(count);
    for (int i = 0; tuple != NULL && i < count; i++) {
        PyObject *name = names[i] != NULL ? PyUnicode_InternFromString(names[i]) : NULL;
        if (name == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_SystemError, "%s: member %d has no name", export, i);
            Py_CLEAR(tuple);
        } else {
            PyTuple_SET_ITEM(tuple, i, name);
        }
    }
    if (tuple == NULL || PyModule_AddObject(module, export, tuple) < 0) {
        Py_XDECREF(tuple);
        return -1;
    }
    return 0;
}

/* A string the record writes: interned into *target, and exported as `export`. */
static int add_string(PyObject *module, const char *export, PyObject **target, const char *text) {
    Py_XSETREF(*target, PyUnicode_InternFromString(text));
    return *target == NULL || PyModule_AddObject(module, export, Py_NewRef(*target)) < 0 ? -1 : 0;
}

int native_add_interface(PyObject *module) {
    if (native_intern_reads(module) < 0) return -1;
    for (int p = 0; p < PROPAGATIONS; p++) {
        if (PROPAGATION_NAMES[p] == NULL) {
            PyErr_Format(PyExc_SystemError, "propagation %d has no name", p);
            return -1;
        }
        if (PyModule_AddIntConstant(module, PROPAGATION_NAMES[p], p) < 0) return -1;
    }
    for (size_t i = 0; i < sizeof(NUMBERS) / sizeof(NUMBERS[0]); i++)
        if (PyModule_AddIntConstant(module, NUMBERS[i].name, NUMBERS[i].value) < 0) return -1;
    for (size_t i = 0; i < sizeof(ORDERS) / sizeof(ORDERS[0]); i++)
        if (add_names(module, ORDERS[i].export, ORDERS[i].names, ORDERS[i].count) < 0) return -1;
    /* the stage name of an event outside any stage (dispatch.py, module_events.py), and the JSON
     * of no keyword arguments (arguments.py encode_call) */
    if (add_string(module, "UNLABELED_STAGE", &s_unlabeled, "unlabeled") < 0) return -1;
    return add_string(module, "EMPTY_KWARGS_JSON", &s_empty_kwargs, "{}");
}
