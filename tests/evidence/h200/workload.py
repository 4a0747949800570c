"""The process audited on the H200 host: CUDA initialised, a cuBLAS matmul, a Triton kernel.

It prints `ready` once every library of those three paths is mapped, then sleeps until killed.
"""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(
        out_ptr + offsets,
        tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
        mask=mask,
    )


def main() -> None:
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    product = a @ b  # cuBLAS / cuBLASLt
    x = torch.randn(4096, device="cuda")
    y = torch.randn(4096, device="cuda")
    out = torch.empty_like(x)
    _add[(triton.cdiv(4096, 1024),)](x, y, out, 4096, BLOCK=1024)
    torch.cuda.synchronize()
    assert torch.allclose(out, x + y)
    print("ready", float(product.float().abs().mean()), torch.cuda.get_device_name(0), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
