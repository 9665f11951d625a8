-- op_families: which kinds of work dominate the trace?
-- One row per (rank, phase, family): the op's base name without namespace, overload or
-- in-place underscore (aten.add_.Tensor -> add), its category (from the table below:
-- convolution, matmul, normalization, pooling, elementwise, reduction, copy, view, other),
-- calls and tensor bytes.
WITH event_bytes AS (
    SELECT u.rank, u.seq, sum(t.numel * t.element_size) AS bytes
    FROM event_tensors u JOIN tensor_states t ON t.rank = u.rank AND t.tensor_id = u.tensor_id
    GROUP BY u.rank, u.seq
),
ops AS (SELECT DISTINCT op, rtrim(split_part(op, '.', 2), '_') AS family FROM events),
categories(ordinal, pattern, category) AS (VALUES
    (0, 'convolution%', 'convolution'), (1, '%conv%', 'convolution'),
    (2, 'mm', 'matmul'), (3, 'addmm', 'matmul'), (4, 'bmm', 'matmul'), (5, 'baddbmm', 'matmul'), (6, 'matmul', 'matmul'),
    (7, 'linear', 'matmul'), (8, 'addmv', 'matmul'), (9, 'mv', 'matmul'),
    (10, '%batch_norm%', 'normalization'), (11, '%layer_norm%', 'normalization'), (12, '%group_norm%', 'normalization'),
    (13, '%pool%', 'pooling'),
    (14, 'sum', 'reduction'), (15, 'mean', 'reduction'), (16, 'amax', 'reduction'), (17, 'max', 'reduction'), (18, 'min', 'reduction'),
    (19, '%softmax%', 'reduction'), (20, 'norm', 'reduction'), (21, 'count_nonzero', 'reduction'), (22, 'all', 'reduction'), (23, 'any', 'reduction'),
    (24, 'clone', 'copy'), (25, 'copy', 'copy'), (26, '_to_copy', 'copy'), (27, 'stack', 'copy'), (28, 'cat', 'copy'), (29, 'full_like', 'copy'),
    (30, 'zeros_like', 'copy'), (31, 'ones_like', 'copy'), (32, 'empty_like', 'copy'), (33, 'fill', 'copy'), (34, 'zero', 'copy'),
    (35, 'view', 'view'), (36, '_unsafe_view', 'view'), (37, 'reshape', 'view'), (38, 't', 'view'), (39, 'transpose', 'view'),
    (40, 'permute', 'view'), (41, 'expand', 'view'), (42, 'unsqueeze', 'view'), (43, 'squeeze', 'view'), (44, 'select', 'view'),
    (45, 'slice', 'view'), (46, 'unbind', 'view'), (47, 'split', 'view'), (48, 'detach', 'view'), (49, 'alias', 'view'),
    (50, 'as_strided', 'view'), (51, 'flatten', 'view'), (52, 'lift_fresh', 'view'),
    (53, 'add', 'elementwise'), (54, 'sub', 'elementwise'), (55, 'rsub', 'elementwise'), (56, 'mul', 'elementwise'),
    (57, 'div', 'elementwise'), (58, 'neg', 'elementwise'), (59, 'sigmoid%', 'elementwise'), (60, 'tanh%', 'elementwise'),
    (61, 'exp', 'elementwise'), (62, 'sqrt', 'elementwise'), (63, 'rsqrt', 'elementwise'), (64, 'relu%', 'elementwise'),
    (65, 'threshold_backward', 'elementwise'), (66, 'eq', 'elementwise'), (67, 'ne', 'elementwise'), (68, 'lt', 'elementwise'),
    (69, 'le', 'elementwise'), (70, 'gt', 'elementwise'), (71, 'ge', 'elementwise'), (72, 'where', 'elementwise'),
    (73, 'addcmul', 'elementwise'), (74, 'addcdiv', 'elementwise'), (75, 'lerp', 'elementwise'), (76, 'pow', 'elementwise'),
    (77, 'heaviside', 'elementwise'), (78, 'abs', 'elementwise'), (79, 'clamp%', 'elementwise'), (80, 'logical_%', 'elementwise'),
    (81, 'bitwise_%', 'elementwise'), (82, 'maximum', 'elementwise'), (83, 'minimum', 'elementwise')
),
op_categories AS (
    -- the first pattern (by ordinal) that matches the family
    SELECT o.op, o.family, coalesce(arg_min(c.category, c.ordinal), 'other') AS category
    FROM ops o LEFT JOIN categories c ON o.family LIKE c.pattern
    GROUP BY o.op, o.family
)
SELECT e.rank, coalesce(e.phase, 'unlabeled') AS phase, oc.family, oc.category,
       count(*) AS calls, count(DISTINCT e.op) AS overloads, coalesce(sum(b.bytes), 0)::BIGINT AS tensor_bytes
FROM events e JOIN op_categories oc ON oc.op = e.op
LEFT JOIN event_bytes b ON b.rank = e.rank AND b.seq = e.seq
GROUP BY ALL
