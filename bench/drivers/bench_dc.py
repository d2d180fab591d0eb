"""Training across two emulated data centres (run as root).

    /usr/bin/python3 bench/drivers/bench_dc.py --claw build/bin/claw --forwarder build/bin/wan_forwarder \
        [--models gpt2-tiny,gpt2-124m] [--rtts 0,5,21,50] [--rate-mbit 1000] [--quality]

throughput  4 ranks, two hosts of one rank in each centre (network namespaces,
            tests/e2e/net/dc_net.sh), joined by tools/wan_forwarder at each
            round-trip time (one-way delay rtt / 2) and --rate-mbit. Layouts:
              single   the 4 ranks in one group on this host (no link, shared
                       memory between ranks): the baseline
              one-dc   the 4 ranks on DC 1's two hosts (TCP between them, no link)
              flat     ZeRO-1 data parallelism over the link, buckets overlapped
              hier     --data-centers 2: reduce-scatter inside, all-reduce across
              hier+ov  the same, overlapped with backward (claw's ring
                       already moves the long haul in 1 MiB chunks, all
                       of a step in flight)
              diloco   --diloco-inner-steps H: the long haul once per H steps
              diloco-4bit  the same with --diloco-delta-bits 4
            tokens/s over the measured steps (all but the first: start-up),
            each as a fraction of `single`, beside the planner's prediction:
            `claw plan --json` on a device written from probes of this run
            (SGEMM shared by the 4 ranks; bench_comm's all-reduce over
            shared memory, TCP inside a centre and the long haul at each
            RTT (64 MiB: what a step sends, past TCP's window growth); the
            compute a byte over TCP costs while every core computes,
            loaded_tcp_probe), its "data_centers" step times.
batch sweep (--sweep-batches 8,32,128,256 [--sweep-model gpt2-tiny] [--sweep-rtt 21]) where
            the compute per step hides the long haul: at one RTT, the global
            batch grown (more micro-batches a step, the same bytes across):
            single, flat, hier and hier+ov, each beside the planner.
collectives (--collectives) claw's ring all-reduce, reduce-scatter and all-gather
            against Open MPI's across the link at --sweep-rtt (bench_comm,
            64 MiB, 2 ranks across and 4 ranks in two centres).
quality     (--quality) gpt2-tiny on 4 ranks (2 instances), the same tokens
            synchronously and with DiLoCo at H = 10, 50, 100, and at H = 50
            with 8- and 4-bit deltas and with 5 streamed fragments:
            validation loss at the end, a table and bench/results/diloco_quality.png.

The SGEMM roof (`claw info`) and the link's settings print with the figures;
lines start with `dc_bench`. Results go to bench/results/dc_results.json.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DC_NET = os.path.join(HERE, "..", "..", "tests", "net", "dc_net.sh")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


RESULTS_JSON = os.path.join(HERE, "..", "results", "dc_results.json")


def save(results):
    with open(RESULTS_JSON + ".tmp", "w") as f:
        json.dump(results, f, indent=1)
    os.replace(RESULTS_JSON + ".tmp", RESULTS_JSON)


def say(**kv):
    print("dc_bench " + " ".join(f"{k}={v}" for k, v in kv.items()), flush=True)


def model_args(model, global_batch=None):
    """The benchmarked job; `global_batch` overrides the preset's (more micro-batches a step, the same bytes)."""
    if model == "gpt2-124m":
        seq, gbs = 256, 32
    else:
        seq, gbs = 128, 8
    return ["--model", model, "--seq-length", str(seq), "--micro-batch-size", "1",
            "--global-batch-size", str(global_batch or gbs)]


# Gradient buckets of 4M elements (16 MB) in every run, so that overlap has buckets to start early (the default,
# 40M, makes gpt2-tiny one bucket, reduced only once backward is over).
BUCKET = ["--ddp-bucket-size", "4000000"]


def common(steps):
    return ["--train-iters", str(steps), "--eval-interval", "0", "--lr", "6e-4", "--lr-warmup-iters", "2",
            "--num-threads", "1", "--straggler-report-interval", "0", "--log-interval", "1",
            "--use-distributed-optimizer", *BUCKET]


LAYOUTS = {
    "flat": ["--overlap-grad-reduce"],
    "hier": ["--data-centers", "2"],
    "hier+ov": ["--data-centers", "2", "--overlap-grad-reduce"],
    "diloco": ["--data-centers", "2", "--overlap-grad-reduce"],
    "diloco-4bit": ["--data-centers", "2", "--overlap-grad-reduce", "--diloco-delta-bits", "4"],
}


def throughput(metrics):
    """Tokens per second over every step but the first ("tokens" counts the run's tokens so far)."""
    recs = [json.loads(line) for line in open(metrics) if line.strip()]
    return (recs[-1]["tokens"] - recs[0]["tokens"]) / sum(r["step_ms"] / 1e3 for r in recs[1:])


def probe_all_reduces(iters):
    """All-reduces of the probed size one comm_probe runs: 4 warm-up, then per iteration one claw, one MPI and a
    burst of 4 of each."""
    return 4 + 10 * iters


def bench_comm_rows(prefix, bench_comm, env, mb, iters, ops, what):
    """bench_comm under `prefix` (an mpirun line) at `mb` MiB and its 8-byte latency size: one dict of its
    `key=value` fields per result line (`what` names the run in the error if it fails)."""
    out = subprocess.run([*prefix, bench_comm, "--min-mb", str(mb), "--max-mb", str(mb), "--iters", str(iters),
                          "--ops", ops, "--latency-reps", "10"], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: {what} {' '.join(prefix)} exited {out.returncode}: {out.stdout[-2000:]}{out.stderr[-2000:]}")
    rows = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.stdout.splitlines()]
    return [r for r in rows if r.get("bench") == "comm"]


def comm_probe(prefix, bench_comm, env, mb=16, iters=3):
    """claw's all-reduce bus bandwidth (GB/s) at `mb` MiB and the 8-byte all-reduce's time (us), over
    probe_all_reduces(iters) all-reduces of that size, under `prefix` (an mpirun line)."""
    lat = busbw = None
    for kv in bench_comm_rows(prefix, bench_comm, env, mb, iters, "all_reduce", "the link probe"):
        if kv["bytes"] == "8":
            lat = float(kv["claw_us"])
        else:
            busbw = float(kv["claw_busbw_gbs"])
    return {"busbw_gbs": busbw, "latency_us": lat}


def _spin(counts, k, stop):
    """A unit of compute for loaded_tcp_probe: counts loop iterations into counts[k] until stop is set."""
    n = 0
    while not stop.value:
        for _ in range(20000):
            n += 1
        counts[k] = n


def loaded_tcp_probe(prefix, bench_comm, env, mb=16, iters=8):
    """The compute a byte sent over TCP between two hosts costs while every core computes, as under training:
    one spinning process per core, and bench_comm's all-reduce (`prefix`: an mpirun line over the two hosts)
    run beside them. Core-seconds the spinners lost, less those lost to a 1 MiB run (start-up: mpirun, MPI's
    wire-up), over the bytes the ranks sent (a 2-rank all-reduce of S sends S from each). The waiting rank's
    polling, both TCP stacks and the scheduler's switches all count, as they do to a training step."""
    import multiprocessing as mp
    cores = os.cpu_count()
    counts, stop = mp.Array("d", cores), mp.Value("b", 0)
    workers = [mp.Process(target=_spin, args=(counts, k, stop)) for k in range(cores)]
    for w in workers:
        w.start()
    try:
        time.sleep(1.0)  # all spinning

        def window(fn):
            c0, t0 = sum(counts), time.monotonic()
            fn()
            return sum(counts) - c0, time.monotonic() - t0

        idle_work, idle_s = window(lambda: time.sleep(3.0))
        rate = idle_work / idle_s  # iterations per second, all cores

        def lost(size, n):
            work, secs = window(lambda: comm_probe(prefix, bench_comm, env, mb=size, iters=n))
            return cores * (secs - work / rate), secs

        small, _ = lost(1, 1)
        big, secs = lost(mb, iters)
        sent = lambda size, n: 2 * probe_all_reduces(n) * (size << 20)  # 2 ranks, each sends the size
        return {"cpu_s_per_byte": (big - small) / (sent(mb, iters) - sent(1, 1)), "probe_s": secs}
    finally:
        stop.value = 1
        for w in workers:
            w.join()


def write_catalog(path, sgemm_gflops, shm, tcp, ranks=4):
    """The planner's device for these runs: this machine's measured SGEMM shared by `ranks` single-threaded ranks,
    shared memory between ranks of one host and TCP between hosts as probed (a ring step's latency: an n-rank
    8-byte all-reduce takes 2 (n - 1) of them)."""
    with open(path, "w") as f:
        f.write(f"""[device.dcbench]
name = "one of {ranks} ranks sharing this machine (measured SGEMM {sgemm_gflops:.0f} GFLOP/s in all)"
memory_gib = 24.0
memory_gbs = {30.0 / ranks}
peak_tflops = {{ fp32 = {sgemm_gflops / ranks / 1e3} }}
gemm_efficiency = 1.0
gemm_knee = 16.0
runtime_overhead_gib = 0.074
collective_temp = {{ all_reduce = 0.6, reduce_scatter = 2.4 }}
devices_per_node = {ranks}
intra_node_gbs = {shm["busbw_gbs"]}
intra_node_latency_us = {shm["latency_us"] / (2 * (ranks - 1))}
inter_node_gbs = {tcp["busbw_gbs"]}
inter_node_latency_us = {tcp["latency_us"] / 2}
network_cpu_ns_per_byte = {tcp["cpu_s_per_byte"] * 1e9 * ranks / os.cpu_count()}
""")


def plan(a, catalog, model, per_node, extra, global_batch=None):
    """`claw plan --json` for the benchmarked layout (DP 4, ZeRO-1, micro-batch 1) on the probed device."""
    args = [a.claw, "plan", "--json", "--top", "1", "--hardware-catalog", catalog, "--device", "dcbench",
            "--num-gpus", "4", "--gpus-per-node", str(per_node), *model_args(model, global_batch),
            "--tensor-model-parallel-size", "1",
            "--pipeline-model-parallel-size", "1", "--context-parallel-size", "1", "--use-distributed-optimizer", *BUCKET,
            "--recompute-granularity", "none", "--precision", "fp32", *extra]
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)}: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def run(cmd, log, env):
    with open(log, "w") as f:
        rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        print(open(log).read()[-3000:])
        sys.exit(f"FAIL: {' '.join(cmd[:6])}... exited {rc} (log {log})")


class Bench:
    """The two centres of one run (tests/e2e/net/dc_net.sh), the links probed in it and the planner's device written
    from them."""

    def __init__(self, a, tmp, results):
        self.a, self.tmp, self.results = a, tmp, results
        self.env = {**os.environ, **MPI_ENV, "DC_P": f"bd{os.getpid()}x", "DC_TMP": tmp}
        self.bench_comm = os.path.join(os.path.dirname(a.claw), "bench_comm")
        self.catalog = f"{tmp}/catalog.toml"

    def dc(self, *args):
        return subprocess.run([DC_NET, *args], env=self.env, check=True, capture_output=True, text=True)

    def __enter__(self):
        self.dc("up", self.env["DC_P"], "2", "1", self.tmp)
        return self

    def __exit__(self, *exc):
        subprocess.run([DC_NET, "down"], env=self.env)

    def probe_centres(self):
        """Shared memory (4 ranks on this host), TCP between two hosts of one centre, and what a byte over TCP
        costs the cores the ranks compute on, under load (a rank's share: x ranks / cores)."""
        shm = comm_probe(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4"], self.bench_comm, self.env)
        one_centre = [DC_NET, "mpirun", "--host", "10.79.0.11,10.79.0.12", "-np", "2"]
        tcp = comm_probe(one_centre, self.bench_comm, self.env)
        tcp.update(loaded_tcp_probe(one_centre, self.bench_comm, self.env))
        say(probe="shared_memory", **shm)
        say(probe="tcp_in_one_centre", **tcp)
        write_catalog(self.catalog, self.results["sgemm_gflops"], shm, tcp)
        self.results["probes"] = {"shared_memory": shm, "tcp_in_one_centre": tcp, "long_haul": {}}

    def link(self, rtt):
        """The long haul at `rtt` ms and the link rate, then its rate as the planner sees it: probed between one
        host of each centre (two ranks: the all-reduce's bus bandwidth is the rate each way); 64 MiB, as big as a
        step's traffic, the median of 3."""
        self.dc("link", self.a.forwarder, str(rtt / 2), str(self.a.rate_mbit))
        haul = comm_probe([DC_NET, "mpirun", "--host", "10.79.0.11,10.79.0.21", "-np", "2"], self.bench_comm,
                          self.env, mb=64, iters=3)
        self.results["probes"]["long_haul"][str(rtt)] = haul
        say(probe="long_haul", rtt_ms=rtt, **haul)
        return haul

    def predict(self, model, rtt, haul, h, global_batch=None):
        """The planner's tokens/s for each layout across the two centres."""
        def strategies(bits):
            extra = ["--data-centers", "2", "--inter-dc-rtt-ms", str(rtt), "--inter-dc-gbps", str(haul["busbw_gbs"] * 8),
                     "--diloco-inner-steps", str(h), "--diloco-delta-bits", str(bits)]
            return plan(self.a, self.catalog, model, 1, extra, global_batch)["data_centers"]
        p, p4 = strategies(32), strategies(4)
        return {"flat": p["flat"]["tokens_per_s"], "hier": p["hierarchical"]["tokens_per_s"],
                "hier+ov": p["hierarchical_overlapped"]["tokens_per_s"],
                "diloco": p["diloco"][str(h)]["tokens_per_s"], "diloco-4bit": p4["diloco"][str(h)]["tokens_per_s"]}

    def train(self, name, launcher, base, flags):
        """tokens/s of one run (`launcher`: the mpirun line)."""
        log, metrics = f"{self.tmp}/{name}.log", f"{self.tmp}/{name}.jsonl"
        run([*launcher, *base, *flags, "--metrics-file", metrics], log, self.env)
        return throughput(metrics)

    SINGLE = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4"]
    ONE_DC = [DC_NET, "mpirun", "--host", "10.79.0.11:2,10.79.0.12:2", "-np", "4"]
    ACROSS = [DC_NET, "mpirun", "-np", "4"]


def bench_throughput(a, tmp, results):
    with Bench(a, tmp, results) as b:
        b.probe_centres()
        for model in a.models.split(","):
            tiny = model == "gpt2-tiny"
            steps, h = (21, 10) if tiny else (4, 3)  # measured: steps 2.., each holding one outer step
            base = [a.claw, "train", *model_args(model), *common(steps)]
            single = b.train("single", b.SINGLE, base, ["--overlap-grad-reduce"])
            pred_single = plan(a, b.catalog, model, 4, [])["layouts"][0]["tokens_per_s"]
            say(model=model, layout="single", tokens_per_s=f"{single:.0f}", predicted=f"{pred_single:.0f}")
            rows = results.setdefault(model, {"single": single, "rtt": {}})
            one_dc = b.train("one_dc", b.ONE_DC, base, ["--overlap-grad-reduce"])
            pred_one = plan(a, b.catalog, model, 2, [])["layouts"][0]["tokens_per_s"]
            say(model=model, layout="one-dc", tokens_per_s=f"{one_dc:.0f}", of_single=f"{one_dc / single:.3f}",
                predicted_of_single=f"{pred_one / pred_single:.3f}")
            # A run of some RTTs keeps the others' rows; --layouts (a subset, to check some cells again) keeps
            # its rows, references, predictions and probes apart, under "repeat".
            if not a.layouts:
                rows.update({"single": single, "one-dc": one_dc})
                rows.setdefault("predicted", {}).setdefault("rtt", {})
                rows["predicted"].update({"single": pred_single, "one-dc": pred_one})
                rows["probes"] = results["probes"]  # this run's links (the top level: the last run's)
            for rtt in [float(x) for x in a.rtts.split(",")]:
                pred = {**b.predict(model, rtt, b.link(rtt), h), "single": pred_single}
                if a.layouts:
                    row = rows.setdefault("repeat", {})[str(rtt)] = {"one-dc": one_dc, "predicted": pred,
                                                                     "probes": results["probes"]}
                else:
                    rows["predicted"]["rtt"][str(rtt)] = pred
                    row = rows["rtt"].setdefault(str(rtt), {})
                row["single"] = single  # the reference these rows are fractions of (measured in this run)
                for name, flags in LAYOUTS.items():
                    if a.layouts and name not in a.layouts:
                        continue
                    extra = ["--diloco-inner-steps", str(h)] if name.startswith("diloco") else []
                    tps = row[name] = b.train(name, b.ACROSS, base, flags + extra)
                    say(model=model, rtt_ms=rtt, rate_mbit=a.rate_mbit, layout=name, tokens_per_s=f"{tps:.0f}",
                        of_single=f"{tps / single:.3f}", predicted_of_single=f"{pred[name] / pred_single:.3f}",
                        error=f"{(pred[name] / pred_single) / (tps / single) - 1:+.1%}")
                save(results)  # each round trip's rows as they come: a long run stopped keeps them


def bench_batch_sweep(a, tmp, results):
    """Where the compute per step allows the long haul to hide: at one RTT, the global batch grown (more
    micro-batches a step, the same gradient bytes across), single against hierarchical with and without overlap
    and flat, each beside the planner's prediction. Steps: at least 4, and about a minute measured."""
    model, rtt = a.sweep_model, a.sweep_rtt
    out = results.setdefault("batch_sweep", {})
    out[model] = {"rtt_ms": rtt, "rate_mbit": a.rate_mbit, "global_batch": {}}
    with Bench(a, tmp, results) as b:
        b.probe_centres()
        haul = b.link(rtt)
        out[model]["probes"] = results["probes"]
        for gbs in [int(x) for x in a.sweep_batches.split(",")]:
            job = model_args(model, gbs)
            tokens = gbs * int(job[job.index("--seq-length") + 1])
            base0 = [a.claw, "train", *job]
            # A first 2-step run sizes the rest: one step's time on one group.
            secs = tokens / b.train("size", b.SINGLE, [*base0, *common(2)], ["--overlap-grad-reduce"])
            steps = max(4, 1 + int(60 / secs))
            base = [*base0, *common(steps)]
            single = b.train("single", b.SINGLE, base, ["--overlap-grad-reduce"])
            pred_single = plan(a, b.catalog, model, 4, [], gbs)["layouts"][0]["tokens_per_s"]
            pred = b.predict(model, rtt, haul, 10, gbs)
            row = {"steps": steps, "single": single, "predicted": {"single": pred_single}}
            say(model=model, global_batch=gbs, steps=steps, layout="single", tokens_per_s=f"{single:.0f}",
                predicted=f"{pred_single:.0f}")
            for name in ("flat", "hier", "hier+ov"):
                tps = row[name] = b.train(name, b.ACROSS, base, LAYOUTS[name])
                row["predicted"][name] = pred[name]
                say(model=model, global_batch=gbs, rtt_ms=rtt, layout=name, tokens_per_s=f"{tps:.0f}",
                    of_single=f"{tps / single:.3f}", predicted_of_single=f"{pred[name] / pred_single:.3f}",
                    error=f"{(pred[name] / pred_single) / (tps / single) - 1:+.1%}")
            out[model]["global_batch"][str(gbs)] = row
            save(results)


def bench_collectives(a, tmp, results):
    """claw's collectives against Open MPI's across the link at --sweep-rtt: bench_comm's 64 MiB all-reduce,
    reduce-scatter and all-gather on 2 ranks (one host in each centre) and on 4 (two in each), the median of 3."""
    out = results.setdefault("collectives", {})
    out.update({"rtt_ms": a.sweep_rtt, "rate_mbit": a.rate_mbit, "mib": 64, "ranks": {}})
    with Bench(a, tmp, results) as b:
        b.dc("link", a.forwarder, str(a.sweep_rtt / 2), str(a.rate_mbit))
        for name, hosts in (("2", ["--host", "10.79.0.11,10.79.0.21", "-np", "2"]), ("4", ["-np", "4"])):
            ops = out["ranks"][name] = {}
            for kv in bench_comm_rows([DC_NET, "mpirun", *hosts], b.bench_comm, b.env, 64, 3,
                                      "all_reduce,reduce_scatter,all_gather", "bench_comm across the link"):
                if kv["bytes"] == "8":
                    continue
                ops[kv["op"]] = {"claw_ms": float(kv["claw_ms"]), "mpi_ms": float(kv["mpi_ms"]),
                                 "claw_busbw_gbs": float(kv["claw_busbw_gbs"])}
                say(collective=kv["op"], ranks=name, rtt_ms=a.sweep_rtt, claw_ms=kv["claw_ms"], mpi_ms=kv["mpi_ms"],
                    claw_busbw_gbs=kv["claw_busbw_gbs"], speedup=f"{float(kv['mpi_ms']) / float(kv['claw_ms']):.2f}")
    save(results)


def bench_quality(a, tmp, results):
    env = {**os.environ, **MPI_ENV}
    steps = a.quality_steps
    seq, gbs = 64, 8
    base = [a.claw, "train", "--model", "gpt2-tiny", "--seq-length", str(seq), "--micro-batch-size", "2",
            "--global-batch-size", str(gbs), "--train-iters", str(steps), "--lr", "1e-3", "--lr-warmup-iters", "20",
            "--eval-interval", str(steps // 6), "--eval-iters", "10", "--num-threads", "1", "--log-interval", "50",
            "--straggler-report-interval", "0", "--use-distributed-optimizer", "--data-centers", "2"]
    curves = {}
    # (name, flags): synchronous, H = 10, 50, 100, and at H = 50 the packed deltas and streamed fragments.
    runs = [("synchronous", [])] + [(f"DiLoCo H={h}", ["--diloco-inner-steps", str(h)]) for h in (10, 50, 100)] + [
        ("DiLoCo H=50, 8-bit deltas", ["--diloco-inner-steps", "50", "--diloco-delta-bits", "8"]),
        ("DiLoCo H=50, 4-bit deltas", ["--diloco-inner-steps", "50", "--diloco-delta-bits", "4"]),
        ("DiLoCo H=50, 5 fragments", ["--diloco-inner-steps", "50", "--diloco-fragments", "5"])]
    for k, (name, extra) in enumerate(runs):
        metrics = f"{tmp}/quality{k}.jsonl"
        run(["mpirun", "--oversubscribe", "--bind-to", "none", "-np", "4", *base, *extra, "--metrics-file", metrics],
            f"{tmp}/quality{k}.log", env)
        recs = [json.loads(line) for line in open(metrics) if line.strip()]
        val = [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r]
        curves[name] = {"train": [(r["step"], r["loss"]) for r in recs], "val": val}
        say(quality=name.replace(" ", "_"), tokens=steps * gbs * seq, final_val_loss=f"{val[-1][1]:.4f}",
            final_train_loss_mean20=f"{statistics.fmean(r['loss'] for r in recs[-20:]):.4f}")
    results["quality"] = {k: v["val"] for k, v in curves.items()}
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, c in curves.items():
        xs, ys = zip(*c["train"])
        w = 20  # a running mean over 20 steps
        sm = [statistics.fmean(ys[max(0, i - w + 1):i + 1]) for i in range(len(ys))]
        line, = ax.plot([x * gbs * seq / 1e3 for x in xs], sm, label=f"{name} (train, mean of 20)", lw=1.2,
                        ls="--" if "," in name else "-")
        vx, vy = zip(*c["val"])
        ax.plot([x * gbs * seq / 1e3 for x in vx], vy, "o--", color=line.get_color(), ms=4, lw=0.8)
    ax.set_xlabel("thousand tokens")
    ax.set_ylabel("loss (dots: validation)")
    ax.set_title("gpt2-tiny, 4 ranks in 2 instances: DiLoCo vs synchronous")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(HERE, "..", "results", "diloco_quality.png"), dpi=110)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--claw", required=True)
    p.add_argument("--forwarder", required=True)
    p.add_argument("--models", default="gpt2-tiny,gpt2-124m")
    p.add_argument("--rtts", default="0,5,21,50")
    p.add_argument("--rate-mbit", type=float, default=1000)
    p.add_argument("--quality", action="store_true")
    p.add_argument("--quality-steps", type=int, default=300)
    p.add_argument("--skip-throughput", action="store_true")
    p.add_argument("--layouts", default="",
                   help=f"measure only these of {','.join(LAYOUTS)} (rows kept apart, under `repeat`)")
    p.add_argument("--sweep-batches", default="",
                   help="global batch sizes for bench_batch_sweep (e.g. 8,32,128,256); empty: no sweep")
    p.add_argument("--sweep-model", default="gpt2-tiny")
    p.add_argument("--sweep-rtt", type=float, default=21)
    p.add_argument("--collectives", action="store_true",
                   help="claw's ring collectives against Open MPI's across the link at --sweep-rtt")
    a = p.parse_args()
    a.layouts = [x for x in a.layouts.split(",") if x]
    if unknown := [x for x in a.layouts if x not in LAYOUTS]:
        p.error(f"--layouts: unknown {','.join(unknown)} (valid: {','.join(LAYOUTS)})")
    info = subprocess.run([a.claw, "info"], capture_output=True, text=True).stdout
    sgemm = re.search(r"sgemm_2048_gflops: ([0-9.]+)", info)
    say(sgemm_gflops=sgemm.group(1) if sgemm else "?", cores=os.cpu_count(), link_rate_mbit=a.rate_mbit)
    results = {"sgemm_gflops": float(sgemm.group(1)) if sgemm else None, "rate_mbit": a.rate_mbit}
    if os.path.exists(RESULTS_JSON):
        # A --skip-throughput run keeps the SGEMM figure the stored throughput rows were measured beside.
        stored = json.load(open(RESULTS_JSON))
        results = {**results, **stored} if a.skip_throughput else {**stored, **results}
    with tempfile.TemporaryDirectory() as tmp:
        if not a.skip_throughput:
            bench_throughput(a, tmp, results)
        if a.sweep_batches:
            bench_batch_sweep(a, tmp, results)
        if a.collectives:
            bench_collectives(a, tmp, results)
        if a.quality:
            bench_quality(a, tmp, results)
    save(results)


if __name__ == "__main__":
    main()
