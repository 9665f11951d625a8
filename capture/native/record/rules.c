/* capture/tensors/propagation.py's arithmetic rules (scalar_arithmetic, zero_operand,
 * one_minus_binary) for the compiled record, each exactly as the Python rule decides, or
 * RULE_UNSURE where this code does not read a value the Python rule does (then the record
 * hands a large output to the Python rule). tests/test_propagation_twins.py runs both on the
 * same operands. */
#include "record/record.h"

/* Whether `value` == `target` (0 or 1) as Python compares a number with it: RULE_APPLIES,
 * RULE_NO, or RULE_UNSURE for a kind of value this does not read (bool, complex, ...). */
static int equals(PyObject *value, long target) {
    if (PyLong_CheckExact(value)) {
        int overflow;
        long v = PyLong_AsLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        return !overflow && v == target ? RULE_APPLIES : RULE_NO;
    }
    if (PyFloat_CheckExact(value)) return PyFloat_AS_DOUBLE(value) == (double)target ? RULE_APPLIES : RULE_NO;
    return RULE_UNSURE;
}

/* _alpha(args, kwargs) == 1: positional at `position`, else the keyword, else 1. */
static int alpha_is_one(PyObject *args, PyObject *kwargs, Py_ssize_t position) {
    PyObject *alpha = PyTuple_GET_SIZE(args) > position ? PyTuple_GET_ITEM(args, position)
                                                         : PyDict_GetItemWithError(kwargs, s_alpha);
    if (alpha == NULL) return PyErr_Occurred() ? -1 : RULE_APPLIES;
    return equals(alpha, 1);
}

/* RULE_APPLIES when a and b have the same dtype and shape, else RULE_NO; -1 error. */
static int same_kind(const Operand *a, const Operand *b) {
    int same = PyObject_RichCompareBool(a->shape, b->shape, Py_EQ);
    if (same <= 0) return same;
    PyObject *da = tensor_attribute(a->tensor, TENSOR_DTYPE), *db = da ? tensor_attribute(b->tensor, TENSOR_DTYPE) : NULL;
    same = db == NULL ? -1 : da == db;
    Py_XDECREF(da);
    Py_XDECREF(db);
    return same < 0 ? -1 : same ? RULE_APPLIES : RULE_NO;
}

static long long nnz_of(PyObject *stats) {
    return PyLong_AsLongLong(PyTuple_GET_ITEM(stats, 0));
}

static int give(PyObject **stats, PyObject *value) {
    *stats = value;
    return value == NULL ? -1 : RULE_APPLIES;
}

/* x op c for a Python number c (scalar_arithmetic): the identity scalar keeps x's statistics. */
static int with_scalar(int propagation, PyObject *args, PyObject *kwargs, const Operand *x, const Operand *out,
                       PyObject **stats) {
    PyObject *c = PyTuple_GET_ITEM(args, 1);
    if (!PyLong_CheckExact(c) && !PyFloat_CheckExact(c)) return RULE_NO; /* bool, complex: not _finite_number */
    if (PyFloat_CheckExact(c) && !isfinite(PyFloat_AS_DOUBLE(c))) return RULE_NO;
    int r = alpha_is_one(args, kwargs, 2);
    if (r != RULE_APPLIES) return r;
    if ((r = same_kind(x, out)) != RULE_APPLIES) return r;
    if (x->stats == NULL) return RULE_NO;
    int identity = equals(c, propagation == PROPAGATE_MUL || propagation == PROPAGATE_DIV ? 1 : 0);
    if (identity == RULE_APPLIES) return give(stats, Py_NewRef(x->stats));
    if (identity < 0) return -1;
    if (propagation != PROPAGATE_MUL || PyTuple_GET_ITEM(x->stats, 1) != Py_True) return RULE_NO;
    /* A 0/1 x times 0 (a neuron's reset to 0.0) is all zeros in every dtype that keeps x's; by
     * any other number, the product's rounding in x's dtype (subnormals, flush-to-zero) is the
     * Python rule's to compute (_unit_product). */
    int zero = equals(c, 0);
    if (zero == RULE_APPLIES) return give(stats, stats_tuple(0LL, Py_True));
    return zero < 0 ? -1 : RULE_UNSURE;
}

/* a + b or a - b with an all-zero tensor operand (zero_operand). */
static int with_zeros(int propagation, PyObject *args, PyObject *kwargs, const Operand *a, const Operand *b,
                      const Operand *out, PyObject **stats) {
    int r = alpha_is_one(args, kwargs, 2);
    if (r != RULE_APPLIES) return r;
    if (b->stats != NULL && nnz_of(b->stats) == 0) {
        if ((r = same_kind(a, out)) < 0) return -1;
        if (r == RULE_APPLIES) return a->stats == NULL ? RULE_NO : give(stats, Py_NewRef(a->stats));
    }
    if (a->stats != NULL && nnz_of(a->stats) == 0 && b->stats != NULL) {
        if ((r = same_kind(b, out)) != RULE_APPLIES) return r;
        if (propagation == PROPAGATE_ADD) return give(stats, Py_NewRef(b->stats));
        PyObject *negated = negation_of(b->stats); /* 0 - b = -b */
        if (negated == NULL) return PyErr_Occurred() ? -1 : RULE_NO;
        return give(stats, negated);
    }
    return PyErr_Occurred() ? -1 : RULE_NO;
}

/* -x's (nnz, is01) from x's, a new reference (capture/tensors/propagation.py negation_of):
 * the same nonzeros; all zeros stay 0/1, a 0/1 x with a one becomes 0/-1; NULL without an
 * error where it is unknown (an x of 0s and -1s negates to 0/1). */
PyObject *negation_of(PyObject *stats) {
    long long nnz = nnz_of(stats);
    if (nnz == -1 && PyErr_Occurred()) return NULL;
    if (nnz == 0) return stats_tuple(0, Py_True);
    return PyTuple_GET_ITEM(stats, 1) == Py_True ? stats_tuple(nnz, Py_False) : NULL;
}

/* rsub(x, 1) = 1 - x of a 0/1 x (one_minus_binary): 0/1 again, zeros and ones swapped. */
static int one_minus(PyObject *args, PyObject *kwargs, const Operand *x, const Operand *out, PyObject **stats) {
    if (x->stats == NULL || PyTuple_GET_ITEM(x->stats, 1) != Py_True) return RULE_NO;
    int r = equals(PyTuple_GET_ITEM(args, 1), 1);
    if (r != RULE_APPLIES) return r;
    if ((r = alpha_is_one(args, kwargs, 2)) != RULE_APPLIES) return r;
    int same = PyObject_RichCompareBool(x->shape, out->shape, Py_EQ);
    if (same <= 0) return same < 0 ? -1 : RULE_NO;
    int64_t numel = shape_numel(out->shape);
    long long nnz = nnz_of(x->stats);
    if (PyErr_Occurred()) return -1;
    return give(stats, stats_tuple((long long)numel - nnz, Py_True));
}

int arithmetic_rule(int propagation, PyObject *args, PyObject *kwargs, const Operand *x, const Operand *other,
                    const Operand *out, PyObject **stats) {
    *stats = NULL;
    if (x == NULL || PyTuple_GET_SIZE(args) < 2) return RULE_NO; /* the rules read x and a second argument */
    if (propagation == PROPAGATE_ONE_MINUS) return other == NULL ? one_minus(args, kwargs, x, out, stats) : RULE_NO;
    if (other == NULL) return with_scalar(propagation, args, kwargs, x, out, stats);
    if (propagation == PROPAGATE_ADD || propagation == PROPAGATE_SUB)
        return with_zeros(propagation, args, kwargs, x, other, out, stats);
    return RULE_NO; /* mul or div of two tensors: no rule */
}
