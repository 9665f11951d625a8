"""Quantized tensors: quantize (zero point 0 and not), their int representation, dequantize
and ops on the dequantized values, including a 0/1 tensor whose quantized form is exact."""

import warnings

import torch

from tests.guest.user import recording, report

warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")  # torch's deprecation
torch.manual_seed(0)
x = torch.randn(16, 32)
spikes = (torch.randn(16, 32) > 0).float()
with recording() as rec:
    with rec.stage("forward"):
        q = torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)
        shifted = torch.quantize_per_tensor(x, 0.05, 10, torch.qint8)
        binary = torch.quantize_per_tensor(spikes, 1.0, 0, torch.quint8)
        channels = torch.quantize_per_channel(x, torch.full((16,), 0.1), torch.zeros(16, dtype=torch.long), 0,
                                              torch.qint8)
        outs = [q.int_repr(), q.dequantize() * 2, shifted.dequantize().relu(), binary.dequantize().sum(),
                channels.dequantize()]
report(outs=outs)
