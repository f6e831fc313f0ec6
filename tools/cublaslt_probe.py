#!/usr/bin/env python3
"""Which bf16-output cublasLt calls the GPU's cuBLAS accepts, and whether they compute the layer.

Run on a GPU machine with PyTorch (it allocates the buffers and loads cuBLAS):
    python3 tools/cublaslt_probe.py
For bf16 A, B, C/D, float32 compute and scale, epilogues BIAS and RELU_BIAS, it asks
cublasLtMatmulAlgoGetHeuristic with the bias left at D's type, set to float32 and to bf16,
and with the buffers' alignment at 256 and at 2 bytes, on the start-up check's shape
(16 x 5 x 24, as src/device/cuda/bf16_dense.rs) and on the bench model's; then runs the
accepted calls and compares D against float64 (the error in bf16 steps). The question it
answers: why hvtrain's start-up check of the bf16 epilogues got CUBLAS_STATUS_INVALID_VALUE
(bench/results/gpu-2026-11-29). Prints one line per case.
"""
import ctypes
import glob
import os
import sys

import torch

torch.cuda.init()
cands = []
for p in sys.path:
    cands += glob.glob(os.path.join(p, "nvidia", "**", "libcublasLt.so*"), recursive=True)
cands += glob.glob("/usr/local/cuda*/lib64/libcublasLt.so*")
cands = sorted(set(cands), key=lambda s: (".so." not in s, s))
print("cublasLt candidates:", cands[:4])
lt = ctypes.CDLL(cands[0])
ver = lt.cublasLtGetVersion
ver.restype = ctypes.c_size_t
print("cublasLt version:", ver())

R32F, R16BF = 0, 14
COMPUTE_32F = 68
A_TRANSA, A_TRANSB, A_EPI, A_BIASPTR, A_BIASTYPE = 3, 4, 7, 8, 26
P_WS, P_ALA, P_ALB, P_ALC, P_ALD = 1, 5, 6, 7, 8
EPI = {"BIAS": 4, "RELU_BIAS": 6}

handle = ctypes.c_void_p()
assert lt.cublasLtCreate(ctypes.byref(handle)) == 0
ws_bytes = 32 << 20
ws = torch.empty(ws_bytes, dtype=torch.uint8, device="cuda")


def layout(dt, rows, cols, ld):
    l = ctypes.c_void_p()
    s = lt.cublasLtMatrixLayoutCreate(ctypes.byref(l), ctypes.c_int(dt), ctypes.c_uint64(rows),
                                      ctypes.c_uint64(cols), ctypes.c_int64(ld))
    assert s == 0, s
    return l


def setd(desc, attr, val):
    return lt.cublasLtMatmulDescSetAttribute(desc, ctypes.c_int(attr), ctypes.byref(val), ctypes.c_size_t(ctypes.sizeof(val)))


def case(m, n, k, epi, bias_type, align, run):
    desc = ctypes.c_void_p()
    assert lt.cublasLtMatmulDescCreate(ctypes.byref(desc), ctypes.c_int(COMPUTE_32F), ctypes.c_int(R32F)) == 0
    setd(desc, A_TRANSA, ctypes.c_int32(0))
    setd(desc, A_TRANSB, ctypes.c_int32(0))
    setd(desc, A_EPI, ctypes.c_int32(EPI[epi]))
    if bias_type is not None:
        s = setd(desc, A_BIASTYPE, ctypes.c_int32(bias_type))
        if s:
            return f"set BIAS_DATA_TYPE: status {s}"
    # Column-major: A m x k (ld m), B k x n (ld k), D m x n (ld m); torch tensors transposed.
    la, lb, ld_ = layout(R16BF, m, k, m), layout(R16BF, k, n, k), layout(R16BF, m, n, m)
    pref = ctypes.c_void_p()
    assert lt.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)) == 0
    v = ctypes.c_uint64(ws_bytes)
    lt.cublasLtMatmulPreferenceSetAttribute(pref, ctypes.c_int(P_WS), ctypes.byref(v), ctypes.c_size_t(8))
    for a in (P_ALA, P_ALB, P_ALC, P_ALD):
        v32 = ctypes.c_uint32(align)
        lt.cublasLtMatmulPreferenceSetAttribute(pref, ctypes.c_int(a), ctypes.byref(v32), ctypes.c_size_t(4))
    res = (ctypes.c_uint8 * (96 * 4))()
    cnt = ctypes.c_int(0)
    s = lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, la, lb, ld_, ld_, pref, ctypes.c_int(4), res, ctypes.byref(cnt))
    out = f"heuristic status {s}, {cnt.value} algorithms"
    if s == 0 and cnt.value > 0 and run:
        g = torch.Generator(device="cuda").manual_seed(1)
        At = torch.randn(k, m, device="cuda", generator=g).bfloat16()
        Bt = torch.randn(n, k, device="cuda", generator=g).bfloat16()
        b32 = torch.randn(m, device="cuda", generator=g)
        bias = b32 if bias_type == R32F else b32.bfloat16()
        Dt = torch.full((n, m), float("nan"), device="cuda").bfloat16()
        p = ctypes.c_uint64(bias.data_ptr())
        setd(desc, A_BIASPTR, p)
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        s2 = lt.cublasLtMatmul(handle, desc, ctypes.byref(one), ctypes.c_void_p(At.data_ptr()), la,
                               ctypes.c_void_p(Bt.data_ptr()), lb, ctypes.byref(zero),
                               ctypes.c_void_p(Dt.data_ptr()), ld_, ctypes.c_void_p(Dt.data_ptr()), ld_,
                               res, ctypes.c_void_p(ws.data_ptr()), ctypes.c_size_t(ws_bytes), stream)
        torch.cuda.synchronize()
        ref = Bt.double() @ At.double() + bias.double()[None, :]
        if epi == "RELU_BIAS":
            ref = ref.clamp_min(0)
        step = ref.abs().clamp_min(1e-30) * 2.0 ** -8
        err = ((Dt.double() - ref).abs() / step).max().item()
        out += f"; matmul status {s2}, largest error {err:.2f} bf16 steps (bias {'fp32' if bias_type == R32F else 'bf16'})"
    lt.cublasLtMatmulPreferenceDestroy(pref)
    for l in (la, lb, ld_):
        lt.cublasLtMatrixLayoutDestroy(l)
    lt.cublasLtMatmulDescDestroy(desc)
    return out


for (m, n, k) in [(16, 5, 24), (4096, 8192, 784), (10, 8192, 4096)]:
    for epi in EPI:
        for bt, name in [(None, "bias type unset (D's: bf16)"), (R32F, "bias float32"), (R16BF, "bias bf16")]:
            for align in (256, 2):
                r = case(m, n, k, epi, bt, align, run=(align == 256))
                print(f"{m}x{n}x{k} {epi:9s} {name:28s} align {align:3d}: {r}", flush=True)
