"""Hand-written neurons, declared: mix `IFNeuron` or `LIFNeuron` into a neuron module and
every model that costs neurons costs it as that neuron (analyze/neurons.py), not only its
ops, the way it costs snnTorch's and Norse's.

    from spiketrace.capture import LIFNeuron

    class MyLIF(LIFNeuron, nn.Module):
        def __init__(self):
            super().__init__()
            self.tau, self.v_threshold, self.v_reset, self.step_mode = 2.0, 1.0, 0.0, "m"
            self._memories = {"v": 0.0}

The capture stores a module's class names and its plain attributes (capture/modules/catalog.py);
these are the attributes the analysis reads, SpikingJelly's names for the same things:

- `v_threshold`: the firing threshold;
- `v_reset`: None resets by subtracting the threshold; a number sets the membrane to it;
- `tau` (LIF): the membrane keeps 1 - 1/tau of itself per step (v += (x - v) / tau);
- `step_mode`: "s" (default), one time step per call; "m", every step of a [T, ...] input;
- `_memories`: a dict of the state the neuron keeps from step to step (default: one, `v`).

The classes add no behaviour and no attribute: a declared module runs exactly as before.
"""

from __future__ import annotations


class IFNeuron:
    """An integrate-and-fire neuron: v += x; spike where v >= v_threshold; reset (module docstring)."""


class LIFNeuron(IFNeuron):
    """A leaky integrate-and-fire neuron: v += (x - v) / tau, then as IFNeuron (module docstring)."""
