/* The propagation rules the compiled record applies to arithmetic (capture/native/_native_rules.c),
 * and how OpPlan.native_propagation tells the record an op's rule (capture/ops/native_record.py
 * keeps the same numbers). */
#ifndef SPIKETRACE_NATIVE_RULES_H
#define SPIKETRACE_NATIVE_RULES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

enum {
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
};

/* One tensor operand of the call (all borrowed): its (nnz, is01) if known, else NULL. */
typedef struct {
    PyObject *tensor, *stats, *shape;
} Operand;

enum { RULE_NO = 0, RULE_APPLIES = 1, RULE_UNSURE = 2 };

/* A state's statistics (nnz, is01) as the registry holds them: a new reference, NULL on error
 * (capture/native/_native_call.c). */
PyObject *stats_tuple(long long nnz, PyObject *is01);

/* arithmetic_rule: whether capture/tensors/propagation.py's rule for this op gives the output's
 * statistics (RULE_APPLIES, *stats a new reference), cannot (RULE_NO: the Python path would
 * scan it too), or this cannot tell (RULE_UNSURE: the Python rule decides); -1 error. */
/* The element count of a shape tuple, -1 with an error set (capture/native/_native_state.c). */
int64_t shape_numel(PyObject *shape);

int arithmetic_rule(int propagation, PyObject *args, PyObject *kwargs, const Operand *x, const Operand *other,
                    const Operand *out, PyObject **stats);

#endif
