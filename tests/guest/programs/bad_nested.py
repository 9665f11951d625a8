"""Nested tensors, strided and jagged: built, then elementwise ops and a reduction of their
parts, beside an ordinary op whose record must survive them."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
parts = [torch.randn(2, 3), torch.randn(4, 3)]
with recording() as rec:
    with rec.stage("forward"):
        strided = torch.nested.nested_tensor(parts)
        strided_out = (strided * 2).relu()
        jagged = torch.nested.nested_tensor(parts, layout=torch.jagged)
        jagged_out = (jagged * 2).relu()
        plain = torch.cat(parts) + 1
report(strided=[t for t in strided_out.unbind()], jagged=[t for t in jagged_out.unbind()], plain=plain)
