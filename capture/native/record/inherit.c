/* What an op's output inherits from its operands' statistics, as capture/tensors/propagation.py's
 * rule for the op derives it: same_elements (views, expand, clone), concatenated (cat, stack),
 * binary_cast, negated here, the arithmetic rules and 1 - x in record/rules.c. The record
 * (record/record.c) asks for the output of a call whose operands it has read; the module's
 * `propagate` asks the same of operands a caller names, so tests/test_propagation_twins.py runs
 * these rules and the Python ones on the same inputs. */
#include "record/record.h"

/* The first operand where it is the first positional argument itself, else NULL. */
static const Operand *first_argument(const Operand *operands, int n) {
    return n > 0 && operands[0].position == 0 && !operands[0].listed ? &operands[0] : NULL;
}

/* concatenated: the parts (the items of args[0]) add up, where every part's are known. */
static int concatenated(const Operand *operands, int n, PyObject *out, Inheritance *inherit) {
    long long nnz = 0;
    int binary = 1, parts = 0, known = 0;
    for (int j = 0; j < n && operands[j].position == 0 && operands[j].listed; j++) {
        PyObject *part = operands[j].stats;
        parts++;
        if (part == NULL) continue;
        known++;
        nnz += PyLong_AsLongLong(PyTuple_GET_ITEM(part, 0));
        binary = binary && PyTuple_GET_ITEM(part, 1) == Py_True;
    }
    if (PyErr_Occurred()) return -1;
    if (parts == 0 || known < parts) return 0;
    PyObject *out_shape = tensor_attribute(out, TENSOR_SHAPE);
    if (out_shape == NULL) return -1;
    inherit->source_numel = shape_numel(out_shape); /* the output holds every part's elements */
    Py_DECREF(out_shape);
    if (inherit->source_numel < 0) return -1;
    inherit->source_stats = stats_tuple(nnz, binary ? Py_True : Py_False);
    return inherit->source_stats == NULL ? -1 : 0;
}

/* binary_cast (a 0/1 operand's statistics) and negated (negation_of the operand's). */
static int cast_or_negated(int propagation, const Operand *x, Inheritance *inherit) {
    PyObject *source = x != NULL ? x->stats : NULL;
    if (source == NULL || (propagation != PROPAGATE_NEGATE && PyTuple_GET_ITEM(source, 1) != Py_True)) return 0;
    if ((inherit->source_numel = shape_numel(x->shape)) < 0) return -1;
    if (propagation != PROPAGATE_NEGATE) {
        inherit->source_stats = Py_NewRef(source);
        return 0;
    }
    inherit->source_stats = negation_of(source);
    if (inherit->source_stats == NULL) return PyErr_Occurred() ? -1 : 0;
    return 0;
}

/* The arithmetic rules and 1 - x (record/rules.c): x the first argument, `other` the second
 * where it is a tensor operand; RULE_UNSURE leaves a large output to the Python rule. */
static int arithmetic(int propagation, PyObject *args, PyObject *kwargs, const Operand *operands, int n,
                      PyObject *out, Inheritance *inherit) {
    const Operand *x = first_argument(operands, n);
    const Operand *other = n > 1 && operands[1].position == 1 && !operands[1].listed ? &operands[1] : NULL;
    Operand out_operand = {out, NULL, tensor_attribute(out, TENSOR_SHAPE), -1, 0};
    if (out_operand.shape == NULL) return -1;
    PyObject *derived = NULL;
    int rule = arithmetic_rule(propagation, args, kwargs, x, other, &out_operand, &derived);
    if (rule == RULE_APPLIES) {
        inherit->source_stats = derived;
        inherit->source_numel = shape_numel(out_operand.shape);
    }
    Py_DECREF(out_operand.shape);
    if (rule < 0 || inherit->source_numel < 0) return -1;
    inherit->to_python = rule == RULE_UNSURE; /* the Python rule decides, for a large output */
    return 0;
}

int output_inheritance(int propagation, PyObject *args, PyObject *kwargs, const Operand *operands, int n,
                       PyObject *out, Inheritance *inherit) {
    *inherit = (Inheritance){NULL, 0, 0};
    const Operand *x = first_argument(operands, n);
    switch (propagation) {
        case PROPAGATE_NONE:
            return 0;
        case PROPAGATE_SAME: /* the first operand's elements */
            if (x == NULL || x->stats == NULL) return 0;
            inherit->source_stats = Py_NewRef(x->stats);
            return (inherit->source_numel = shape_numel(x->shape)) < 0 ? -1 : 0;
        case PROPAGATE_PYTHON:
            inherit->to_python = 1;
            return 0;
        case PROPAGATE_CONCAT:
            return concatenated(operands, n, out, inherit);
        case PROPAGATE_BINARY_CAST:
        case PROPAGATE_NEGATE:
            return cast_or_negated(propagation, x, inherit);
        default:
            return arithmetic(propagation, args, kwargs, operands, n, out, inherit);
    }
}

int inherited_stats(const Inheritance *inherit, int64_t numel, PyObject **stats) {
    *stats = NULL;
    if (inherit->source_stats == NULL) return 0;
    PyObject *nnz = PyTuple_GET_ITEM(inherit->source_stats, 0), *is01 = PyTuple_GET_ITEM(inherit->source_stats, 1);
    if (inherit->source_numel == numel) { /* a view: the source's elements */
        *stats = Py_NewRef(inherit->source_stats);
    } else if (inherit->source_numel == 0) { /* nothing to repeat: known only when empty too */
        if (numel == 0) *stats = stats_tuple(0LL, Py_True);
    } else { /* expand repeats each element numel / source_numel times */
        long long base = PyLong_AsLongLong(nnz);
        if (base == -1 && PyErr_Occurred()) return -1;
        *stats = stats_tuple(base * (numel / inherit->source_numel), is01);
    }
    return *stats == NULL && PyErr_Occurred() ? -1 : 0;
}

/* known[id(t)] (borrowed), checked to be (nnz: int, is01) or None; NULL where known does not
 * name t (no error) or on an error. */
static PyObject *known_stats(PyObject *known, PyObject *t) {
    PyObject *key = PyLong_FromVoidPtr(t);
    PyObject *stats = key != NULL ? PyDict_GetItemWithError(known, key) : NULL;
    Py_XDECREF(key);
    int malformed = stats != NULL && stats != Py_None &&
                    (!PyTuple_CheckExact(stats) || PyTuple_GET_SIZE(stats) != 2 ||
                     !PyLong_CheckExact(PyTuple_GET_ITEM(stats, 0)));
    if (malformed) {
        PyErr_SetString(PyExc_TypeError, "propagate: known statistics are (nnz: int, is01) or None");
        return NULL;
    }
    return stats;
}

/* The operands `propagate` reads, as the record takes them: each argument that `known` names
 * (id(tensor) -> (nnz, is01) or None), and the items of a list or tuple argument all of whose
 * items it names. Their count, or -1 with an exception set; shapes[] holds new references. */
static int named_operands(PyObject *args, PyObject *known, Operand *operands, PyObject **shapes) {
    int n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(args); i++) {
        PyObject *a = PyTuple_GET_ITEM(args, i);
        int list = PyList_CheckExact(a) || PyTuple_CheckExact(a);
        Py_ssize_t items = list ? PySequence_Fast_GET_SIZE(a) : 1, named = 0;
        PyObject *stats[MAX_TENSORS];
        for (; named < items && named < MAX_TENSORS - n; named++) {
            PyObject *t = list ? PySequence_Fast_GET_ITEM(a, named) : a;
            if ((stats[named] = known_stats(known, t)) == NULL) break;
        }
        if (PyErr_Occurred()) return -1;
        if (named == 0 || named < items) continue; /* not a tensor operand, nor a list of them */
        for (Py_ssize_t j = 0; j < items; j++) {
            PyObject *t = list ? PySequence_Fast_GET_ITEM(a, j) : a;
            if ((shapes[n] = tensor_attribute(t, TENSOR_SHAPE)) == NULL) return -1;
            operands[n] = (Operand){t, stats[j] == Py_None ? NULL : stats[j], shapes[n], i, list};
            n++;
        }
    }
    return n;
}

PyObject *native_propagate(PyObject *self, PyObject *const *argv, Py_ssize_t argc) {
    (void)self;
    if (argc != 5 || !PyLong_Check(argv[0]) || !PyTuple_CheckExact(argv[1]) || !PyDict_Check(argv[2]) ||
        !PyDict_Check(argv[4])) {
        PyErr_SetString(PyExc_TypeError, "propagate(propagation: int, args: tuple, kwargs: dict, out, known: dict)");
        return NULL;
    }
    long propagation = PyLong_AsLong(argv[0]);
    if (propagation == -1 && PyErr_Occurred()) return NULL;
    Operand operands[MAX_TENSORS];
    PyObject *shapes[MAX_TENSORS] = {NULL}, *result = NULL, *out_shape = NULL;
    Inheritance inherit = {NULL, 0, 0};
    int n = named_operands(argv[1], argv[4], operands, shapes);
    if (n < 0 || output_inheritance((int)propagation, argv[1], argv[2], operands, n, argv[3], &inherit) < 0) goto done;
    int64_t numel = (out_shape = tensor_attribute(argv[3], TENSOR_SHAPE)) != NULL ? shape_numel(out_shape) : -1;
    if (numel < 0 || inherited_stats(&inherit, numel, &result) < 0) goto done;
    if (result == NULL) result = inherit.to_python ? PyUnicode_FromString("python") : Py_NewRef(Py_None);
done:
    for (int i = 0; i < MAX_TENSORS; i++) Py_XDECREF(shapes[i]);
    Py_XDECREF(out_shape);
    Py_XDECREF(inherit.source_stats);
    return result;
}
