"""NeuroBench 2.3.0 from a trace, one module per idea:

    convention.py  synop and mac as NeuroBench's SynapticOperations counts them
                   (`count(trace, convention="neurobench")`)
    batches.py     the samples NeuroBench divides by, batch by batch
    cells.py       what an RNNCell, LSTMCell or GRUCell call costs beyond its matrix products
    dense.py       SynapticOperations' Dense: every input and weight taken as nonzero
    metrics.py     the six metrics of Benchmark.run() (`neurobench_metrics(trace)`)
"""

from spiketrace.analyze.counters.neurobench.convention import (
                                                               CONVENTIONS,
                                                               COUNTERS,
                                                               MissingStatisticsError,
                                                               count,
                                                               first_inputs,
                                                               per_sample,
                                                               sample_count,
                                                               samples,
                                                               summary,
)

__all__ = ["CONVENTIONS", "COUNTERS", "MissingStatisticsError", "count", "first_inputs", "per_sample", "sample_count",
           "samples", "summary"]
