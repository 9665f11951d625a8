"""The NeuroMC model's rule tables, as data (SpikingJelly 2.0.0 op_counter/neuromc/core.py, mapping.py).

Nothing here computes: the mapper (mapper.py with modules.py, fallback.py, optimizer.py)
turns a trace into fragments, activity.py applies the count and memory tables below to them,
and report.py prices the result under a preset (costs.py).
"""

from __future__ import annotations

# -- which modules give fragments (SpikingJelly's rules: isinstance, first match wins) ---------
CONV_CLASSES = ("torch.nn.modules.conv.Conv1d", "torch.nn.modules.conv.Conv2d")
CONV3D_CLASS = "torch.nn.modules.conv.Conv3d"
LINEAR_CLASS = "torch.nn.modules.linear.Linear"
BATCH_NORM_CLASSES = (
    "torch.nn.modules.batchnorm.BatchNorm1d",
    "torch.nn.modules.batchnorm.BatchNorm2d",
    "torch.nn.modules.batchnorm.BatchNorm3d",
)
# Neurons (soma fragments) are those of analyze/neurons.py: SpikingJelly's BaseNode and, in
# default mode, the snnTorch and Norse neurons.

# -- ops of the trace fallback, and ops that carry no NeuroMC work ------------------------------
CONVOLUTION = "aten.convolution.default"
CONVOLUTION_BACKWARD = "aten.convolution_backward.default"
GEMMS = ("aten.addmm.default", "aten.mm.default", "aten.bmm.default")
BATCH_NORM = "aten.native_batch_norm.default"
BATCH_NORM_BACKWARD = "aten.native_batch_norm_backward.default"
# A CUDA run's batch norm (analyze/counters/device_ops.py): cudnn_batch_norm(x, ...) as native's;
# its backward(input, grad_output, weight, ...) with input first, where native's has grad_out.
CUDNN_BATCH_NORM = "aten.cudnn_batch_norm.default"
CUDNN_BATCH_NORM_BACKWARD = "aten.cudnn_batch_norm_backward.default"
BATCH_NORMS = (BATCH_NORM, CUDNN_BATCH_NORM)
BATCH_NORM_BACKWARDS = (BATCH_NORM_BACKWARD, CUDNN_BATCH_NORM_BACKWARD)
# SpikingJelly's six trace-fallback ops (compat maps these only); default mode the cuDNN ones too.
SPIKINGJELLY_FALLBACK_OPS = (CONVOLUTION, *GEMMS, BATCH_NORM, BATCH_NORM_BACKWARD)
FALLBACK_OPS = (*SPIKINGJELLY_FALLBACK_OPS, CUDNN_BATCH_NORM, CUDNN_BATCH_NORM_BACKWARD)
# A backward GEMM with no forward GEMM of its shapes left takes the spike-ness of the other
# GEMM flavour (SpikingJelly's addmm <-> mm alternative key).
GEMM_ALTERNATIVE = {"aten.addmm.default": "aten.mm.default", "aten.mm.default": "aten.addmm.default"}

IGNORED_OP_PREFIXES = (
    "aten.detach", "aten.view", "aten.t.default", "aten.transpose", "aten.permute", "aten.expand",
    "aten.slice", "aten.select", "aten.alias", "aten._unsafe_view", "aten.as_strided", "aten.unsqueeze",
    "aten.squeeze", "aten.unbind", "aten.clone", "aten.copy_", "profiler.",
)
AUXILIARY_OPS = (
    "aten.all.default", "aten._local_scalar_dense.default", "aten.lift_fresh.default", "aten._to_copy.default",
    "aten.add.Tensor", "aten.add_.Tensor", "aten.add.Scalar", "aten.add_.Scalar",
    "aten.sub.Tensor", "aten.sub_.Tensor", "aten.sub.Scalar", "aten.sub_.Scalar",
    "aten.rsub.Tensor", "aten.rsub.Scalar",
    "aten.mul.Tensor", "aten.mul_.Tensor", "aten.mul.Scalar", "aten.mul_.Scalar",
    "aten.div.Tensor", "aten.div_.Tensor", "aten.div.Scalar", "aten.div_.Scalar",
    "aten.empty.memory_format", "aten.cat.default", "aten.stack.default", "aten.split.Tensor",
    "aten.index.Tensor", "aten.full_like.default", "aten.mse_loss.default", "aten.mse_loss_backward.default",
    "aten.where.self", "aten.where.ScalarOther", "aten.where.ScalarSelf",
    "aten.sqrt.default", "aten.sqrt_.default", "aten.rsqrt.default", "aten.sigmoid.default", "aten.sigmoid_.default",
    "aten.sum.default", "aten.sum.dim_IntList", "aten.mean.dim",
    "aten.eq.Tensor", "aten.eq.Scalar", "aten.ne.Tensor", "aten.ne.Scalar", "aten.lt.Tensor", "aten.lt.Scalar",
    "aten.le.Tensor", "aten.le.Scalar", "aten.gt.Tensor", "aten.gt.Scalar", "aten.ge.Tensor", "aten.ge.Scalar",
    "aten.logical_and.default", "aten.logical_or.default", "aten.logical_xor.default", "aten.logical_not.default",
    "aten.new_empty_strided.default", "aten.ones_like.default", "aten.zeros_like.default",
)

# -- SpikingJelly's cost constants (core.py), the defaults of the preset ----------------------
MAC_COST_PJ = {
    "fp_soma": 0.548 + 0.548 * (1.0 / 16.0),
    "bp_grad": 0.548 + 0.812,
    "wg": 0.548 + 0.548 * (1.0 / 16.0),
    "ann_fe": 0.548 + 0.812,
    "ann_be": 0.548 + 0.812,
    "ann_we": 0.548 + 0.812,
}
EXTRA_OP_COST_PJ = {"mux": 0.548 * (1.0 / 16.0), "add": 0.548, "mul": 0.812, "comp": 0.056, "sqrt": 0.514}
PRIMITIVES = ("mux", "add", "mul", "comp", "sqrt")
CORE_TYPES = ("fp_soma", "fp_bn", "bp_grad", "bp_bn", "bp_grad_opt", "wg",
              "ann_fe", "ann_be", "ann_we", "ann_bn", "ann_bn_bp")

# -- base (weight-stationary) memory: instances per core type (mapping.py) --------------------
# role -> instance: reg_i/reg_w/reg_o registers, sram_i/sram_w/sram_o SRAM banks.
BASE_INSTANCES = {
    "fp_soma": ("reg_1b", "reg_16b", "reg_16b", "sram_fp_conv_in_s", "sram_fp_conv_in_w", "sram_fp_conv_out_xi"),
    "ann_fe": ("reg_16b", "reg_16b", "reg_16b", "sram_fp_conv_in_w", "sram_fp_conv_in_w", "sram_fp_conv_out_xi"),
    "bp_grad": ("reg_16b", "reg_16b", "reg_16b", "sram_bp_conv_in_du", "sram_bp_conv_in_w", "sram_bp_conv_out_res"),
    "ann_be": ("reg_16b", "reg_16b", "reg_16b", "sram_bp_conv_in_du", "sram_bp_conv_in_w", "sram_bp_conv_out_res"),
    "wg": ("reg_1b", "reg_16b", "reg_16b", "sram_wg_conv_in_s", "sram_wg_conv_in_du", "sram_wg_conv_out_dw"),
    "ann_we": ("reg_16b", "reg_16b", "reg_16b", "sram_wg_conv_in_du", "sram_wg_conv_in_du", "sram_wg_conv_out_dw"),
}
ROLES = ("reg_i", "reg_w", "reg_o", "sram_i", "sram_w", "sram_o")
WEIGHT_GRADIENT_CORES = ("wg", "ann_we")
INPUT_GRADIENT_CORES = ("bp_grad", "ann_be")

# Streamed (FE/BE) dataflow: (level, direction, role, element count, precision, weight_load).
# Element counts: M = MACs, Oe = output elements, W = weight elements, P = partial sums
# Oe * (chunks - 1), S = streamed Oe * chunks, chunks = ceil(reduction / 16) * FY * FX.
# weight_load terms are skipped when the stage reuses weights that fit the weight SRAM.
STREAM_TERMS = (
    ("reg", "rh2l", "reg_i", "M", "input", False),
    ("reg", "wh2l", "reg_i", "M", "input", False),
    ("reg", "rh2l", "reg_w", "W", "weight", True),
    ("reg", "wh2l", "reg_w", "W", "weight", True),
    ("sram", "rh2l", "sram_w", "W", "weight", True),
    ("reg", "rl2h", "reg_o", "M", "output", False),
    ("reg", "rh2l", "reg_o", "M-Oe", "output", False),
    ("reg", "wh2l", "reg_o", "M", "output", False),
    ("reg", "wl2h", "reg_o", "P", "output", False),
    ("sram", "rh2l", "sram_i", "S", "input", False),
    ("sram", "rh2l", "sram_o", "P", "output", False),
    ("sram", "wl2h", "sram_o", "S", "output", False),
)
# Weight-gradient (WE) dataflow; Si = ceil(M / min(K, 16)), Sw = ceil(M / min(C, 16)).
WEIGHT_GRADIENT_TERMS = (
    ("reg", "rh2l", "reg_i", "M", "input", False),
    ("reg", "rh2l", "reg_w", "M", "weight", False),
    ("reg", "wh2l", "reg_i", "M", "input", False),
    ("reg", "wh2l", "reg_w", "M", "weight", False),
    ("reg", "rl2h", "reg_o", "Oe", "output", False),
    ("reg", "rh2l", "reg_o", "M-Oe", "output", False),
    ("reg", "wl2h", "reg_o", "M", "output", False),
    ("sram", "rh2l", "sram_i", "Si", "input", False),
    ("sram", "rh2l", "sram_w", "Sw", "weight", False),
    ("sram", "wl2h", "sram_o", "Oe", "output", False),
)

# -- extra (process) memory: variable -> (count key, bits per element, register, SRAM) ---------
# Count keys: OKBT = OY*OX*K*B*T, OCBT = OY*OX*C*B*T, CT = C*T, KT = K*T (K for the optimizer),
# FYFXKC = FY*FX*K*C (FY*FX*C for the optimizer).
_SOMA_FORWARD = {
    "fp_yi1": ("OKBT", 16, "reg_16b", "sram_fp_conv_out_xi"),
    "fp_u_l": ("OKBT", 16, "reg_16b", "sram_fp_soma_u"),
    "fp_s_l": ("OKBT", 1, "reg_1b", "sram_fp_soma_s"),
    "fp_smask_l": ("OKBT", 1, "reg_1b", "sram_fp_soma_smask"),
}
_SOMA_BACKWARD = {
    "bp_conv_res": ("OCBT", 16, "reg_16b", "sram_bp_conv_out_res"),
    "bp_u_l_pre": ("OCBT", 16, "reg_16b", "sram_bp_grad_in_u"),
    "bp_s_l_pre": ("OCBT", 1, "reg_1b", "sram_bp_grad_in_s"),
    "bp_smask_l_pre": ("OCBT", 1, "reg_1b", "sram_bp_grad_in_smask"),
    "bp_du_l_pre": ("OCBT", 16, "reg_16b", "sram_bp_grad_out_du"),
}
_BN_FORWARD = {name: (key, 16, "reg_16b", "sram_2MB") for name, key in (
    ("fp_bn_mean_v", "KT"), ("fp_bn_variance", "KT"), ("fp_bn_n", "OKBT"), ("fp_bn_sqrt", "KT"),
    ("fp_bn_xi_", "OKBT"), ("fp_bn_y", "KT"), ("fp_bn_b", "KT"))}
_BN_BACKWARD = {name: (key, 16, "reg_16b", "sram_2MB") for name, key in (
    ("bp_bn_du_l_pre1", "OCBT"), ("bp_bn_sqrt", "CT"), ("bp_bn_y", "CT"), ("bp_bn_m", "OCBT"),
    ("bp_bn_n", "OCBT"), ("bp_bn_sigma_m", "CT"), ("bp_bn_sigma_n", "CT"), ("bp_bn_sigma_mn", "CT"),
    ("bp_bn_dy", "CT"), ("bp_bn_db", "CT"), ("bp_bn_du_l_pre2", "OCBT"))}
# Adam/AdamW: per tensor family y (0/1-D parameters, KT) / b (0/1-D, KT) / w (the others, FYFXKC).
_ADAM = {f"opt_{prefix}{family}{suffix}": ("FYFXKC" if family == "w" else "KT", 32, "reg_32b", "sram_6MB")
         for prefix, suffix in (("", ""), ("d", ""), ("v_", ""), ("s_", ""), ("vbc_", ""), ("sbc_", ""), ("", "_updated"))
         for family in ("y", "b", "w")}
# (process key, phase or optimizer op) -> variables
EXTRA_VARIABLES = {
    ("with_sg", "forward"): _SOMA_FORWARD,
    ("with_sg", "backward"): _SOMA_BACKWARD,
    ("with_bn", "forward"): _BN_FORWARD,
    ("with_bn", "backward"): _BN_BACKWARD,
    ("with_opt", "adam"): _ADAM,
    ("with_opt", "adamw"): _ADAM,
}
EXTRA_READ_MULTIPLIER = {
    "fp_yi1": 1, "fp_u_l": 1, "fp_s_l": 1, "bp_conv_res": 1, "bp_u_l_pre": 1, "bp_s_l_pre": 1,
    "bp_smask_l_pre": 1, "bp_du_l_pre": 1, "fp_bn_mean_v": 2, "fp_bn_variance": 1, "fp_bn_n": 1,
    "fp_bn_sqrt": 1, "fp_bn_xi_": 1, "fp_bn_y": 1, "fp_bn_b": 1, "bp_bn_du_l_pre1": 2, "bp_bn_sqrt": 2,
    "bp_bn_y": 2, "bp_bn_m": 3, "bp_bn_n": 3, "bp_bn_sigma_m": 1, "bp_bn_sigma_n": 1, "bp_bn_sigma_mn": 2,
    **{f"opt_{n}": 1 for n in ("y", "b", "w", "dy", "db", "dw", "v_y", "v_b", "v_w", "s_y", "s_b", "s_w",
                                 "vbc_y", "vbc_b", "vbc_w", "sbc_y", "sbc_b", "sbc_w")},
}
EXTRA_WRITTEN = frozenset({
    "fp_yi1", "fp_u_l", "fp_s_l", "fp_smask_l", "fp_bn_mean_v", "fp_bn_variance", "fp_bn_n", "fp_bn_sqrt",
    "fp_bn_xi_", "bp_u_l_pre", "bp_du_l_pre", "bp_bn_m", "bp_bn_sigma_m", "bp_bn_sigma_n", "bp_bn_sigma_mn",
    "bp_bn_dy", "bp_bn_db", "bp_bn_du_l_pre2",
    *(f"opt_{p}_{s}" for p in ("v", "s", "vbc", "sbc") for s in ("y", "b", "w")),
    "opt_y_updated", "opt_b_updated", "opt_w_updated",
})
# Soma backward writes only these (level, variable) pairs, not the EXTRA_WRITTEN rule.
SOMA_BACKWARD_WRITES = frozenset({("reg", "bp_du_l_pre"), ("sram", "bp_u_l_pre")})
# SGD: per parameter element, 32-bit words of sram_6MB: (direction, copies, condition).
SGD_TERMS = (
    ("rh2l", 2, None),
    ("wl2h", 1, None),
    ("rh2l", 1, "momentum_and_buffer"),
    ("wl2h", 1, "momentum"),
)
SGD_BITS = 32
SGD_INSTANCE = "sram_6MB"

MODEL_INFO = {
    "model_id": "neuromc_712c66_runtime_v2",
    "fidelity": "source-aligned",
    "source_urls": (
        "https://www.nature.com/articles/s41467-026-70586-x",
        "https://github.com/dayanhn/NeuroMC/commit/712c66f47cf76ae530a55f8bcad3858bd68788de",
    ),
    "technology_nm": 32,
    "precision": "1-bit spikes and 16-bit values under the NeuroMC v1 constants",
    "scope": ("runtime-mapped NeuroMC FE/BE/WE energy; BN and optimizer use "
              "source-derived formulas without independent external validation"),
}

# -- the fragment frame every mapper produces (one row per fragment part) ---------------------
LOOP_DIMS = ("B", "T", "C", "K", "OY", "OX", "FY", "FX")
FRAGMENT_COLUMNS = (
    "rank", "step", "seq", "sub", "stage", "phase", "op_name", "core_type", "process_key",
    *LOOP_DIMS, "G", "input_precision_bits", "weight_precision_bits", "output_precision_bits",
    "input_numel", "weight_numel", "output_numel", "mac_count", "conv_type", "b_type", "t_type", "source",
    "optimizer_has_momentum", "optimizer_has_weight_decay", "optimizer_has_momentum_buffer", "module",
)
