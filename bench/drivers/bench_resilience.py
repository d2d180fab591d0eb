"""Resilience of a supervised job (`claw launch`): failures injected into a
4-rank TP2 x DP2 gpt2-tiny run with asynchronous checkpoints every 10 steps.

    /usr/bin/python3 bench/drivers/bench_resilience.py --claw build/bin/claw [--trials 20] [--stop-trials 2] [--iters 100]

  reference  the job under plain mpirun, never interrupted: its metrics are
             what every supervised run must end with, bit for bit;
  kill       --trials runs, each with `kill -9` of a random rank after a
             random step: every run must complete, its final metrics (every
             step after the one it resumed from) bitwise the reference's,
             with at most 10 steps lost; the time to resume is measured from
             the kill to the first step of the restarted job (and, as the
             supervisor logs it, from the failure's detection);
  stop       --stop-trials runs with `kill -STOP` of a random rank under the
             default settings (hang timeout learned with a 20 s floor,
             heartbeat timeout 30 s): detected within twice the learned
             timeout and under 60 s, restarted, completed bitwise.

Each figure prints as one line `resilience_bench name=value ...`; a failed
requirement prints `FAIL` and the script exits 1.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time


def line(**kv):
    print("resilience_bench " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def read_jsonl(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for ln in f:
            ln = ln.strip()
            if ln:
                try:
                    out.append(json.loads(ln))
                except json.JSONDecodeError:
                    pass  # a line being written
    return out


def job_args(iters):
    return ["--model", "gpt2-tiny", "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4",
            "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters", str(iters),
            "--lr-decay-iters", str(iters), "--eval-interval", "1000", "--eval-iters", "1", "--lr", "2e-3",
            "--lr-warmup-iters", "2", "--num-threads", "1", "--peak-gflops", "100", "--log-interval", "10",
            "--tensor-model-parallel-size", "2"]


MPI = ["--oversubscribe", "--bind-to", "none"]


def ranks_of(tmp):
    """PIDs of the running attempt's ranks: the children of its mpirun."""
    out = subprocess.run(["pgrep", "-f", f"^mpirun .*{tmp}/"], capture_output=True, text=True).stdout.split()
    if not out:
        return []
    return [int(p) for p in subprocess.run(["pgrep", "-P", out[0]], capture_output=True, text=True).stdout.split()]


def supervised_trial(args, reference, kind, trial_dir):
    os.makedirs(trial_dir)
    metrics, events = f"{trial_dir}/metrics.jsonl", f"{trial_dir}/events.jsonl"
    cmd = [args.claw, "launch", "--nproc", "4", "--launcher-args", " ".join(MPI), "--events-file", events, "--",
           "train", *job_args(args.iters), "--save", f"{trial_dir}/ckpt", "--save-interval", "10", "--async-save",
           "--metrics-file", metrics]
    at = random.randint(5, args.iters - 10)
    with open(f"{trial_dir}/launch.log", "w") as log:
        sup = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while len(read_jsonl(metrics)) < at:
            if sup.poll() is not None or time.time() > deadline:
                sup.kill()
                return {"ok": False, "why": f"the job ended or stalled before step {at}"}
            time.sleep(0.05)
        pids = ranks_of(trial_dir)
        if len(pids) != 4:
            sup.kill()
            return {"ok": False, "why": f"found {len(pids)} ranks"}
        victim = random.choice(pids)
        t_fault = time.time()
        os.kill(victim, signal.SIGKILL if kind == "kill" else signal.SIGSTOP)
        try:
            code = sup.wait(timeout=600)
        except subprocess.TimeoutExpired:
            sup.kill()
            return {"ok": False, "why": "the supervised job did not finish in 600 s"}
    ev = read_jsonl(events)
    failure = next((e for e in ev if e["event"] == "failure"), None)
    resumed = next((e for e in ev if e["event"] == "resumed"), None)
    r = {"at": at, "code": code, "ok": True, "why": ""}
    if code != 0 or not failure or not resumed:
        return {**r, "ok": False, "why": f"exit code {code}, events {[e['event'] for e in ev]}"}
    got = read_jsonl(metrics)
    first = resumed["from_iteration"] + 1
    steps = [m["step"] for m in got]
    if steps != list(range(first, args.iters + 1)):
        return {**r, "ok": False, "why": f"metrics hold steps {steps[:3]}..{steps[-3:]}, expected {first}..{args.iters}"}
    for m in got:
        ref = reference[m["step"]]
        if m["loss"] != ref["loss"] or m["grad_norm"] != ref["grad_norm"]:
            return {**r, "ok": False, "why": f"step {m['step']}: loss {m['loss']!r} vs {ref['loss']!r}"}
    r.update(lost=resumed["lost_steps"], resume_s=resumed["time"] - t_fault,
             resume_after_detect_s=resumed["time_to_resume_s"], detect_s=failure["time"] - t_fault,
             reason=failure["reason"], final_loss=got[-1]["loss"])
    if kind == "stop":
        text = open(f"{trial_dir}/launch.log").read()
        m = re.search(r"over its timeout of ([0-9.]+) s", text)
        r["timeout_s"] = float(m.group(1)) if m else None
        if not m or r["detect_s"] > 2 * r["timeout_s"] or r["detect_s"] > 60:
            r.update(ok=False, why=f"detected after {r['detect_s']:.1f} s, learned timeout {r['timeout_s']}")
        if f"pid {victim}" not in failure["reason"]:
            r.update(ok=False, why=f"the stopped rank (pid {victim}) is not named: {failure['reason']}")
    if r["lost"] > 10:
        r.update(ok=False, why=f"{r['lost']} steps lost, more than the checkpoint interval")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--claw", default="build/bin/claw")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--stop-trials", type=int, default=2)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the trials' directories")
    args = ap.parse_args()
    args.claw = os.path.abspath(args.claw)
    random.seed(args.seed)
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    tmp = tempfile.mkdtemp(prefix="claw_resilience.")
    failed = 0
    try:
        t0 = time.time()
        subprocess.run(["mpirun", *MPI, "-np", "4", args.claw, "train", *job_args(args.iters), "--metrics-file",
                        f"{tmp}/reference.jsonl"], check=True, capture_output=True)
        reference = {m["step"]: m for m in read_jsonl(f"{tmp}/reference.jsonl")}
        line(case="reference", steps=len(reference), seconds=f"{time.time() - t0:.1f}",
             final_loss=repr(reference[args.iters]["loss"]))
        for kind, n in (("kill", args.trials), ("stop", args.stop_trials)):
            results = []
            for k in range(n):
                r = supervised_trial(args, reference, kind, f"{tmp}/{kind}{k}")
                results.append(r)
                failed += not r["ok"]
                extra = {key: (f"{v:.2f}" if isinstance(v, float) else v) for key, v in r.items()
                         if key in ("at", "lost", "detect_s", "resume_s", "resume_after_detect_s", "timeout_s")}
                line(case=kind, trial=k + 1, ok=r["ok"], **extra, **({"why": repr(r["why"])} if not r["ok"] else {}))
            good = [r for r in results if r["ok"]]
            if good:
                res = [r["resume_s"] for r in good]
                line(case=f"{kind}_summary", completed_bitwise=f"{len(good)}/{n}",
                     max_lost_steps=max(r["lost"] for r in good),
                     median_resume_s=f"{statistics.median(res):.2f}", worst_resume_s=f"{max(res):.2f}",
                     median_detect_s=f"{statistics.median(r['detect_s'] for r in good):.2f}",
                     worst_detect_s=f"{max(r['detect_s'] for r in good):.2f}",
                     **({"timeout_s": f"{good[0]['timeout_s']:.1f}"} if kind == "stop" else {}))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        print(f"FAIL: {failed} trial(s) failed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
