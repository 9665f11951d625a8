"""Sparse COO and CSR tensors made, multiplied, coalesced and densified inside a stage: their
`tensors` rows hold an empty stride and storage_ptr -1 (a non-strided layout has neither
strides nor a storage), as the schema says."""

import torch

from tests.guest.user import recording, report

torch.manual_seed(0)
net = torch.nn.Linear(4, 3)
dense = torch.randn(5, 4) * (torch.rand(5, 4) > 0.5)
weight = torch.randn(4, 2)
with recording(model=net) as rec:
    with rec.stage("forward"):
        coo = dense.to_sparse()
        csr = dense.to_sparse_csr()
        product = torch.sparse.mm(coo, weight)
        csr_product = csr @ weight
        merged = (coo + coo).coalesce()
        back = csr.to_dense()
        out = net(merged.to_dense())
report(product=product, csr_product=csr_product, merged=merged, merged_nnz=merged._nnz(), back=back, out=out,
       layouts=[str(coo.layout), str(csr.layout), str(merged.layout)])
