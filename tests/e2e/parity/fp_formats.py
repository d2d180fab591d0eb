"""claw's number formats, bit for bit, against PyTorch 2.x and a reference
written here from the OCP Microscaling Formats v1.0 spec and NVIDIA's NVFP4
description (formats_dump.cc lists the cases).

  python fp_formats.py --dump-tool build/bin/formats_dump

The input holds every value of each 8- and 16-bit format, the midpoints
between neighbours and the floats just either side of each midpoint (where
rounding to nearest even decides), signed zeros, infinities, NaNs, the
extremes of float32, subnormals of every format, 2M random bit patterns
(every exponent, NaN payloads) and 1M normal values at scales from 1e-30 to
1e30 in blocks, so MX/NVFP4 blocks see zeros, NaNs, infinities and every
scale exponent including the clamped ones.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

F32_MAX = np.float32(np.finfo(np.float32).max)


def grid_values(dtype):
    bits = 8 if dtype in (torch.float8_e4m3fn, torch.float8_e5m2) else 16
    codes = torch.arange(1 << bits, dtype=torch.int32)
    codes = codes.to(torch.uint8 if bits == 8 else torch.int16)
    return codes.view(dtype).float().numpy()


def around(values):
    """values, the midpoints between sorted finite neighbours and the floats next to each midpoint."""
    v = np.unique(values[np.isfinite(values)].astype(np.float32))
    mid = ((v[:-1].astype(np.float64) + v[1:]) / 2).astype(np.float32)
    out = [v, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    return np.concatenate(out)


def make_input():
    rng = np.random.default_rng(20)
    parts = []
    for dt in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float16, torch.bfloat16):
        parts.append(around(grid_values(dt)))
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float32)
    parts.append(around(np.concatenate([e2m1, -e2m1])))
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, F32_MAX, -F32_MAX, 1e-45, -1e-45, 1.17549435e-38,
               448, 449, 464, 465, 479, 480, 481, 57344, 61439, 61440, 61441, 65504, 65519, 65520, 6, 6.5, 7, 5]
    parts.append(np.array(special, np.float32))
    parts.append(rng.integers(0, 1 << 32, size=2_000_000, dtype=np.uint64).astype(np.uint32).view(np.float32))
    scales = 10.0 ** rng.uniform(-30, 30, size=(1_000_000 // 32, 1))
    normal = (rng.standard_normal((1_000_000 // 32, 32)) * scales).astype(np.float32)
    normal[::97] = 0  # whole zero blocks
    normal[::89, 5] = np.nan
    normal[::83, 7] = -np.inf
    parts.append(normal.ravel())
    x = np.concatenate([p.astype(np.float32).ravel() for p in parts])
    pad = (-len(x)) % 32
    x = np.concatenate([x, np.zeros(pad, np.float32)])
    # Shuffle the edge values into blocks too (in whole blocks of 32 so the random blocks stay intact).
    return x


def torch_codes(x, dtype, clamp=None):
    t = torch.from_numpy(x.copy())
    if clamp is not None:
        t = t.clamp(-clamp, clamp)  # NaN stays NaN; +-inf become +-clamp
    c = t.to(dtype)
    return c.view(torch.uint8 if c.element_size() == 1 else torch.int16).numpy().view(
        np.uint8 if c.element_size() == 1 else np.uint16)


def e2m1_codes(v):
    """Round to nearest even on the E2M1 grid, saturating at 6 (v: float32)."""
    table = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], np.float64)
    with np.errstate(invalid="ignore"):
        a = np.abs(v.astype(np.float64))
    a = np.where(np.isnan(a), 0, np.minimum(a, 6))
    d = np.abs(a[:, None] - table[None, :])
    best = d.min(axis=1, keepdims=True)
    cand = d == best
    even = cand & (np.arange(8)[None, :] % 2 == 0)
    idx = np.where(even.any(axis=1), even.argmax(axis=1), cand.argmax(axis=1))
    sign = np.signbit(v) & ~np.isnan(v)
    return (idx + 8 * sign).astype(np.uint8)


def mx_reference(x, dtype, emax, fmax, rule):
    with np.errstate(invalid="ignore"):
        b = x.reshape(-1, 32).astype(np.float64)
    amax = np.abs(b).max(axis=1)  # NaN propagates
    nan = ~np.isfinite(amax)
    with np.errstate(all="ignore"):
        _, e = np.frexp(np.where(nan | (amax == 0), 1.0, amax))
        shared = (e - 1) - emax  # floor(log2 amax) - emax
        if rule == "rceil":
            shared = shared + (np.where(nan, 0, amax) / np.exp2(shared) > fmax)
    shared = np.clip(shared, -127, 127)
    shared = np.where(amax == 0, -127, shared)
    scales = np.where(nan, 255, shared + 127).astype(np.uint8)
    with np.errstate(all="ignore"):
        v = (b * np.exp2(-shared)[:, None]).astype(np.float32)
    codes = torch_codes(np.clip(v, -fmax, fmax).ravel(), dtype)
    codes = np.where(np.repeat(nan, 32), 0, codes).astype(np.uint8)
    return np.concatenate([codes, scales])


def nvfp4_reference(x):
    finite = x[np.isfinite(x)]
    amax = np.float32(np.abs(finite).max())
    s_enc = np.float32(1) if amax == 0 else np.minimum(np.float32(2688) / amax, F32_MAX)
    b = x.reshape(-1, 16)
    with np.errstate(all="ignore"):
        bamax = np.abs(b).max(axis=1)
        nan = ~np.isfinite(bamax)
        sv = (bamax / np.float32(6)) * s_enc
        sc = torch_codes(np.clip(np.where(nan, 0, sv), -448, 448).astype(np.float32), torch.float8_e4m3fn)
        sc = np.where(nan, 0x7F, sc).astype(np.uint8)
        d = torch.from_numpy(sc.copy()).view(torch.float8_e4m3fn).float().numpy()
        m = np.where((d == 0) | nan, np.float32(0), s_enc / np.where(d == 0, 1, d)).astype(np.float32)
        v = (b * m[:, None]).astype(np.float32).ravel()
    return np.concatenate([e2m1_codes(v), sc])


def compare(name, got, want, x=None, nan_ok=None):
    bad = got != want
    if nan_ok is not None:
        bad &= ~nan_ok
    n = int(bad.sum())
    if n:
        i = np.flatnonzero(bad)[:5]
        xs = x[i] if x is not None and len(x) == len(got) else []
        print(f"FAIL {name}: {n} of {len(got)} differ; first at {i}: claw {got[i]} reference {want[i]} input {xs}")
        return False
    print(f"ok   {name}: {len(got)} codes equal")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dump-tool", required=True)
    args = ap.parse_args()
    x = make_input()
    print(f"torch {torch.__version__}; {len(x)} float32 inputs")
    with tempfile.TemporaryDirectory() as d:
        x.tofile(os.path.join(d, "in.f32"))
        subprocess.run([args.dump_tool, os.path.join(d, "in.f32"), d], check=True)
        got = {f[:-4]: np.fromfile(os.path.join(d, f), np.uint8) for f in os.listdir(d) if f.endswith(".bin")}
    got["bf16"] = got["bf16"].view(np.uint16)
    got["f16"] = got["f16"].view(np.uint16)
    nan = np.isnan(x)
    ok = True
    # NaN payloads and the sign of a NaN are not part of the contract: any NaN code matches any NaN.
    ok &= compare("bf16 vs torch.bfloat16", got["bf16"], torch_codes(x, torch.bfloat16), x, nan)
    ok &= compare("f16 vs torch.float16", got["f16"], torch_codes(x, torch.float16), x, nan)
    ok &= compare("e4m3 (saturating) vs torch.float8_e4m3fn of clamp(x, -448, 448)", got["e4m3"],
                  torch_codes(x, torch.float8_e4m3fn, 448.0), x, nan)
    ok &= compare("e4m3 training cast vs the same", got["e4m3_sat"], torch_codes(x, torch.float8_e4m3fn, 448.0), x, nan)
    ok &= compare("e5m2 (IEEE overflow) vs torch.float8_e5m2", got["e5m2"], torch_codes(x, torch.float8_e5m2), x, nan)
    ok &= compare("e5m2 training cast vs torch.float8_e5m2 of clamp(x, -57344, 57344)", got["e5m2_sat"],
                  torch_codes(x, torch.float8_e5m2, 57344.0), x, nan)
    ok &= compare("e2m1 vs the reference", got["e2m1"], e2m1_codes(x), x)
    ok &= compare("MXFP8 e4m3 (floor) vs the OCP reference", got["mx_e4m3"],
                  mx_reference(x, torch.float8_e4m3fn, 8, 448.0, "floor"))
    ok &= compare("MXFP8 e5m2 (floor) vs the OCP reference", got["mx_e5m2"],
                  mx_reference(x, torch.float8_e5m2, 15, 57344.0, "floor"))
    ok &= compare("MXFP8 e4m3 (rceil) vs the reference", got["mx_e4m3_rceil"],
                  mx_reference(x, torch.float8_e4m3fn, 8, 448.0, "rceil"))
    ok &= compare("NVFP4 vs the reference", got["nvfp4"], nvfp4_reference(x))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
