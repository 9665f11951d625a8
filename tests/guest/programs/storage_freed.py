"""Tensors whose storage was freed or shrunk before the capture first saw them, as FSDP frees
resharded parameters (untyped_storage().resize_(0)), then metadata-only ops on them and a
real op on the part a shrunk storage still holds."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
freed = torch.randn(64, 64)
freed.untyped_storage().resize_(0)
shrunk = torch.randn(1024, 1024)  # 4 MB
shrunk.untyped_storage().resize_(40)  # 10 float32 values left
with recording() as rec:
    with rec.stage("forward"):
        views = [freed.detach(), freed.view(4096), torch.ops.aten.alias(freed), shrunk.detach(), shrunk.view(-1)]
        held = shrunk.view(-1)[:10]  # inside what the storage holds: readable
        doubled = held * 2
report(shapes=[tuple(v.shape) for v in views], doubled=doubled, freed_bytes=freed.untyped_storage().nbytes(),
       shrunk_bytes=shrunk.untyped_storage().nbytes())
