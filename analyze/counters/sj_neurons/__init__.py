"""SpikingJelly 2.0.0's fused neuron ops (`sj_<neuron>.forward/.backward`, what a multi-step
neuron call is on CUDA and meta), counted as the same call's CPU decomposition: the FLOP, byte
and AC rules (op -> SQL) flop.py, memory_access.py and ac.py take.

* rules.py: IF, LIF and PLIF, the conventions every neuron's rules follow, and the interface;
* costs.py: the per element-step cost tables, the SQL that sums them, and QIF, EIF and
  Izhikevich's rules.
"""

from spiketrace.analyze.counters.sj_neurons.rules import AC, BYTES, FLOP, OPS

__all__ = ["AC", "BYTES", "FLOP", "OPS"]
