"""The common activation functions and their backward ops, which SpikingJelly's counters have
no rule for: their FLOPs and their memory traffic (docs/deviations.md, 4d).

FLOPs, one per element of each tensor an op returns, whatever the function. That is
ptflops' convention (ptflops/pytorch_ops.py: `relu_flops_counter_hook` counts `output.numel()`
for ReLU, PReLU, ELU, LeakyReLU, ReLU6 and GELU, `_numel_functional_flops_hook` `input.numel()`
for F.relu, F.gelu, F.silu, ...), and the one spiketrace already keeps for `exp`, `sqrt` and
`log` (flop.py): an elementwise function's evaluation is one operation. thop counts ReLU,
ReLU6 and LeakyReLU as 0 and has no rule for GELU, SiLU, Tanh or Sigmoid; that would hide the
comparison a ReLU does per element, so it is not followed. A backward op is one elementwise
function of the incoming gradient and the saved input (or output), one FLOP per element of
each gradient it returns (PReLU's also returns its weight's gradient per element, summed by
a separate op). `sigmoid` keeps SpikingJelly's own rule (4 per element, flop.py).

Memory: every operand read and every result written once (`tensor_bytes`), as SpikingJelly's
MemoryAccessCounter counts its unary elementwise ops (`neg`, `sigmoid`).
"""

from __future__ import annotations

# Forward ops, as a run dispatches them: in-place forms (nn.ReLU(inplace=True) -> relu_),
# nn.ReLU6 and nn.Hardtanh -> hardtanh, nn.SELU -> elu (scaled), nn.LogSigmoid ->
# log_sigmoid_forward, nn.PReLU -> _prelu_kernel; under torch.inference_mode the composite
# forms arrive whole (selu, log_sigmoid, prelu).
FORWARD = (
    "aten.relu.default", "aten.relu_.default",
    "aten.gelu.default", "aten.gelu_.default",
    "aten.silu.default", "aten.silu_.default",
    "aten.tanh.default", "aten.tanh_.default",
    "aten.hardtanh.default", "aten.hardtanh_.default",
    "aten.leaky_relu.default", "aten.leaky_relu_.default",
    "aten.elu.default", "aten.elu_.default",
    "aten.celu.default", "aten.celu_.default",
    "aten.selu.default", "aten.selu_.default",
    "aten.softplus.default",
    "aten.log_sigmoid.default",
    "aten.hardsigmoid.default", "aten.hardsigmoid_.default",
    "aten.hardswish.default", "aten.hardswish_.default",
    "aten.mish.default", "aten.mish_.default",
    "aten.threshold.default", "aten.threshold_.default",
    "aten.prelu.default", "aten._prelu_kernel.default",
)
# log_sigmoid_forward returns (out, buffer): the buffer (x's size on CPU) holds an intermediate
# of the same evaluation, so only out counts FLOPs (its bytes are written all the same).
FORWARD_FIRST_OUTPUT = ("aten.log_sigmoid_forward.default",)
# Backward ops: ReLU's is threshold_backward; ELU, SELU and CELU share elu_backward.
BACKWARD = (
    "aten.threshold_backward.default",
    "aten.gelu_backward.default",
    "aten.silu_backward.default",
    "aten.sigmoid_backward.default",
    "aten.tanh_backward.default",
    "aten.hardtanh_backward.default",
    "aten.leaky_relu_backward.default",
    "aten.elu_backward.default",
    "aten.softplus_backward.default",
    "aten.log_sigmoid_backward.default",
    "aten.hardsigmoid_backward.default",
    "aten.hardswish_backward.default",
    "aten.mish_backward.default",
)
# (grad_input, grad_weight), both of the input's shape.
BACKWARD_TWO_GRADIENTS = ("aten._prelu_kernel_backward.default",)

FLOP: dict[str, str] = {
    **{op: "o0_numel" for op in (*FORWARD, *FORWARD_FIRST_OUTPUT, *BACKWARD)},
    **{op: "(o0_numel + coalesce(o1_numel, 0))" for op in BACKWARD_TWO_GRADIENTS},
}
BYTES: dict[str, str] = {op: "tensor_bytes" for op in FLOP}
