/* The propagation rules the compiled record applies (capture/tensors/propagation.py's, in C):
 * what an op's output takes from its operands' statistics instead of a scan
 * (record/inherit.c), the arithmetic rules among them in record/rules.c. */
#ifndef SPIKETRACE_RECORD_RULES_H
#define SPIKETRACE_RECORD_RULES_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* One tensor operand of the call (all borrowed): its (nnz, is01) if known, else NULL. */
typedef struct {
    PyObject *tensor, *stats, *shape;
    Py_ssize_t position; /* its positional argument */
    int listed;          /* an item of a tensor list argument (cat's, stack's), not the argument itself */
} Operand;

/* What the output may take from its operands instead of a scan: statistics for
 * `source_numel` elements (a new reference, scaled to the output's count as propagation.py's
 * _elements does), or `to_python` (the Python rule may apply). */
typedef struct {
    PyObject *source_stats;
    int64_t source_numel;
    int to_python;
} Inheritance;

enum { RULE_NO = 0, RULE_APPLIES = 1, RULE_UNSURE = 2 };

/* record/rules.c: -x's (nnz, is01) from x's (propagation.py negation_of), a new reference, or
 * NULL (without an error where it is unknown). */
PyObject *negation_of(PyObject *stats);

/* record/inherit.c: what the output `out` of an op whose rule is `propagation` inherits from
 * its `n` tensor operands (in argument order) into *inherit: 0, or -1 with an exception set. */
int output_inheritance(int propagation, PyObject *args, PyObject *kwargs, const Operand *operands, int n,
                       PyObject *out, Inheritance *inherit);

/* record/inherit.c: the statistics of an output of `numel` elements that inherits `inherit`'s
 * source statistics (propagation.py _elements): a new reference into *stats, or NULL where
 * they do not follow (a scan decides); 0, or -1 with an exception set. */
int inherited_stats(const Inheritance *inherit, int64_t numel, PyObject **stats);

/* record/rules.c arithmetic_rule: whether propagation.py's rule for this op gives the output's
 * statistics (RULE_APPLIES, *stats a new reference), cannot (RULE_NO: the Python path would
 * scan it too), or this cannot tell (RULE_UNSURE: the Python rule decides); -1 error. */
int arithmetic_rule(int propagation, PyObject *args, PyObject *kwargs, const Operand *x, const Operand *other,
                    const Operand *out, PyObject **stats);

/* A state's statistics (nnz, is01) as the registry holds them: a new reference, NULL on error
 * (record/call.c). */
PyObject *stats_tuple(long long nnz, PyObject *is01);

/* The element count of a shape tuple, -1 with an error set (record/state.c). */
int64_t shape_numel(PyObject *shape);

#endif
