"""Tensor states: the registry's one row per (tensor, version), value statistics (nnz, 0/1)
and the rules that derive an output's statistics from its inputs'."""
