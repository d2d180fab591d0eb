"""Checkpoint cost on gpt2-124m: how long the training loop is blocked by a
save, claw's asynchronous save against the torch.save pattern, and how fast
the bytes reach the disk against the disk's own speed.

    /usr/bin/python3 bench/drivers/bench_ckpt.py --claw build/bin/claw [--dir DIR] [--np N]

In one run, on the same filesystem:
  disk        dd if=/dev/zero bs=16M count=64 oflag=direct (and conv=fsync,
              buffered): the disk's sequential write speed;
  torch_save  the pattern the issue names: one process holds the whole state
              (GPT-2 124M parameters + AdamW exp_avg and exp_avg_sq, fp32,
              Debian's torch) and torch.save()s it into one file, then fsyncs;
              the training loop waits for all of it (timed with and without
              the fsync);
  claw_sync   `claw train --save` without --async-save: snapshot, checksums,
              write, fsync and commit inside the step;
  claw_async  `claw train --save --async-save`: the step waits for the
              barrier and layout at the save, the snapshot (copied while the
              next step's forward/backward run) before the next update, and the
              commit; from the metrics' ckpt_blocked_ms.
Throughput: the bytes of each rank's file over its background write time
(write + fsync), against dd's.

Each figure prints as one line `ckpt_bench name=value ...`.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def line(**kv):
    print("ckpt_bench " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def dd(path, direct):
    flags = ["oflag=direct"] if direct else ["conv=fsync"]
    out = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=16M", "count=64", *flags],
                         capture_output=True, text=True, check=True).stderr
    os.remove(path)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", out)
    return int(m.group(1)) / float(m.group(2)) / 1e6


def torch_save(path):
    """GPT-2 124M's tensors and AdamW state, saved as torch.save does it."""
    import torch
    C, L, V, T = 768, 12, 50257, 1024
    shapes = {"wte": (V, C), "wpe": (T, C), "ln_f.w": (C,), "ln_f.b": (C,)}
    for l in range(L):
        for n, s in {"ln_1.w": (C,), "ln_1.b": (C,), "c_attn.w": (C, 3 * C), "c_attn.b": (3 * C,),
                     "c_proj.w": (C, C), "c_proj.b": (C,), "ln_2.w": (C,), "ln_2.b": (C,),
                     "c_fc.w": (C, 4 * C), "c_fc.b": (4 * C,), "mlp_proj.w": (4 * C, C), "mlp_proj.b": (C,)}.items():
            shapes[f"h.{l}.{n}"] = s
    params = {k: torch.nn.Parameter(torch.randn(*s) * 0.02) for k, s in shapes.items()}
    opt = torch.optim.AdamW(params.values(), lr=1e-4)
    for p in params.values():
        p.grad = torch.randn_like(p)
    opt.step()
    state = {"model": {k: p.data for k, p in params.items()}, "optimizer": opt.state_dict(), "iteration": 1}
    nbytes = sum(p.numel() for p in params.values()) * 4 * 3
    times = {False: [], True: []}
    for fsync in (False, True, False, True):
        t0 = time.perf_counter()
        torch.save(state, path)
        if fsync:
            fd = os.open(path, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        times[fsync].append(time.perf_counter() - t0)
        os.remove(path)
    return nbytes, {k: min(v) for k, v in times.items()}  # the better of two


def claw_run(a, work, name, extra):
    metrics = os.path.join(work, f"{name}.jsonl")
    ck = os.path.join(work, name)
    cmd = [a.claw, "train", "--model", "gpt2-124m", "--micro-batch-size", "1", "--global-batch-size", str(a.np),
           "--seq-length", "256", "--train-iters", str(a.iters), "--eval-interval", "0", "--lr-warmup-iters", "1",
           "--save", ck, "--save-interval", str(a.save_interval), "--metrics-file", metrics, *extra]
    if a.np > 1:
        cmd = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(a.np), *cmd]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    recs = [json.loads(l) for l in open(metrics)]
    shutil.rmtree(ck, ignore_errors=True)
    return recs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temporary one)")
    ap.add_argument("--np", type=int, default=1, help="ranks for the claw runs (data parallel, ZeRO-1)")
    ap.add_argument("--iters", type=int, default=14)
    ap.add_argument("--save-interval", type=int, default=4)
    a = ap.parse_args()
    work = tempfile.mkdtemp(dir=a.dir, prefix="claw_bench_ckpt_")
    try:
        direct = dd(os.path.join(work, "dd.bin"), True)
        buffered = dd(os.path.join(work, "dd.bin"), False)
        line(name="disk", dd_direct_MBps=f"{direct:.0f}", dd_fsync_MBps=f"{buffered:.0f}", dir=work)

        nbytes, ts = torch_save(os.path.join(work, "torch.pt"))
        line(name="torch_save", bytes=nbytes, blocked_s=f"{ts[True]:.3f}", blocked_no_fsync_s=f"{ts[False]:.3f}",
             MBps=f"{nbytes / ts[True] / 1e6:.0f}")

        extra = ["--use-distributed-optimizer"] if a.np > 1 else []
        for name, flags in (("claw_sync", []), ("claw_async", ["--async-save"])):
            recs = claw_run(a, work, name, extra + flags)
            si = a.save_interval
            saves = [r for r in recs if r["step"] % si == 0]  # the last step's save is waited for at exit
            # A save's blocking: its own step's share plus the next step's
            # (the snapshot wait before the update, and the commit's poll).
            blocked = []
            for r in saves:
                # (not when the next step saves too: the run's last step always does)
                nxt = [x for x in recs if x["step"] == r["step"] + 1 and x["step"] % si and x["step"] != a.iters]
                blocked.append(r["ckpt_blocked_ms"] + (nxt[0]["ckpt_blocked_ms"] if nxt else 0))
            committed = [r for r in recs if "ckpt_committed" in r]
            write_s = [r["ckpt_write_s"] for r in committed]
            snap_s = [r["ckpt_snapshot_s"] for r in committed]
            mb = committed[0]["ckpt_bytes"] / 1e6 if committed else 0
            plain = [r["step_ms"] for r in recs if r["step"] % si not in (0, 1) and r["step"] > 1]
            after = [r["step_ms"] for r in recs if r["step"] % si == 1 and r["step"] > 1]
            line(name=name, ranks=a.np, saves=len(blocked), blocked_ms_median=f"{statistics.median(blocked):.1f}",
                 blocked_ms_max=f"{max(blocked):.1f}", rank0_file_MB=f"{mb:.0f}",
                 snapshot_s=f"{statistics.median(snap_s):.3f}", write_s=f"{statistics.median(write_s):.3f}",
                 write_MBps=f"{mb / statistics.median(write_s):.0f}",
                 write_vs_dd_direct=f"{mb / statistics.median(write_s) / direct:.2f}",
                 step_ms_median=f"{statistics.median(plain):.0f}",
                 step_ms_after_save=f"{statistics.median(after):.0f}")
            if name == "claw_async":
                med = statistics.median(blocked)
                line(name="ratio", torch_save_over_claw_async=f"{ts[True] * 1e3 / med:.0f}",
                     torch_save_no_fsync_over_claw_async=f"{ts[False] * 1e3 / med:.0f}", goal=40)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
