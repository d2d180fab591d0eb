#!/usr/bin/env python3
"""Every flag of `claw train` and `claw rl` applies or is refused.

For each flag of the command's resolved configuration (the table it prints
before allocating anything) the test gives a value other than the default,
alone on top of a small run (--train-iters 0), and requires one of:
  - the run starts and its printed configuration shows the value given (so
    the value reached the configuration the command runs, and was not lost
    on the way, as --lora-rank once was under --load-hf); or
  - the command refuses it with a one-line `claw: error:` naming the flag,
    exit code 1 or 2, before any step.
A flag that is accepted but printed with another value fails the test.

    flags_apply.py CLAW_BINARY train|rl
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile

# Values for flags whose alternatives cannot be derived from the default
# (choices of a string, or a file the flag names).
CHOICES = {
    "normalization": "RMSNorm", "position-embedding-type": "rope", "moe-router-score-function": "sigmoid",
    "moe-token-drop-policy": "position", "moe-layer-freq": "2", "fp8-format": "hybrid", "fp8-recipe": "tensorwise",
    "fp8-amax-compute-algo": "max", "fp8-layer-selection": "auto", "lora-target-modules": "q_proj,v_proj",
    "lora-modules-to-save": "embed_tokens", "rerun-mode": "disabled", "hang-timeout": "checkpoint=600",
    "device": "cuda", "recompute-granularity": "full", "recompute-method": "block", "freeze": "*.bias",
    "lr-decay-style": "linear", "exp-avg-dtype": "bf16", "exp-avg-sq-dtype": "bf16", "main-params-dtype": "fp16",
    "tokenizer-type": "HuggingFaceTokenizer", "dpo-loss-type": "ipo", "split": "90,10,0", "parallel": "auto",
    "pipeline-schedule": "gpipe", "cp-comm-type": "a2a", "parallel-order": "tp-dp-cp-ep-pp",
    "chat-template": "chatml", "task": "add", "hidden-dropout": "0.1", "lora-dropout": "0.1",
    "rollout-server-host": "0.0.0.0", "loss-agg-mode": "seq-mean-token-mean",
}
# Flags that name something to read or write: a path made for the test.
PATHS = {"metrics-file": "m.jsonl", "tensorboard-dir": "tb", "peak-cache-dir": "peak", "save": "ck",
         "data-cache-path": "cache", "data-dir": "nodata", "load": "noload", "load-hf": "nohf",
         "data-path": "nodata/x", "vocab-file": "nodata/vocab.json", "merge-file": "nodata/merges.txt",
         "tokenizer-model": "nodata/tok.model", "prompt-data": "prompts2.jsonl", "eval-prompt-data": "prompts2.jsonl",
         "env-url": "http://127.0.0.1:9/", "reward-file": "nodata/r.py"}


def config(out):
    """The printed configuration: {flag: value}."""
    cfg, inside = {}, False
    for line in out.splitlines():
        if "resolved config" in line:
            inside = True
            continue
        if inside:
            m = re.match(r"^  (\S+)(?: +(.*))?$", line)
            if not m:
                if cfg:
                    break
                continue
            cfg[m.group(1)] = (m.group(2) or "").strip()
    return cfg


def alternative(name, default, tmp):
    if name in PATHS:
        return PATHS[name] if PATHS[name].startswith("http") else os.path.join(tmp, PATHS[name])
    if name in CHOICES:
        return CHOICES[name]
    if default in ("true", "false"):
        return None if default == "true" else ""  # a switch: given, it is true
    if re.fullmatch(r"-?\d+", default):
        return str(int(default) + 2 if int(default) >= 0 else 1)
    if re.fullmatch(r"-?\d*\.?\d+(e[-+]?\d+)?", default):
        v = float(default)
        return f"{v * 0.5:g}" if v != 0 else "0.25"
    return None


def same(given, printed):
    if given == printed:
        return True
    try:
        return abs(float(given) - float(printed)) <= 1e-9 * max(1.0, abs(float(given)))
    except ValueError:
        return given.replace(" ", "") == printed.replace(" ", "")


def main():
    claw, command = sys.argv[1], sys.argv[2]
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "prompts.jsonl"), "w") as f:
        for words in ("a b", "c d e", "f g"):
            m = [{"role": "user", "content": f"Reverse: {words}"},
                 {"role": "assistant", "content": " ".join(reversed(words.split()))}]
            f.write(json.dumps({"messages": m}) + "\n")
    with open(os.path.join(tmp, "prompts2.jsonl"), "w") as f:
        f.write(open(os.path.join(tmp, "prompts.jsonl")).read())
    # A one-layer model: each run builds it (and its optimizer) before step 0.
    common = ["--train-iters", "0", "--num-threads", "1", "--micro-batch-size", "2", "--seq-length", "64",
              "--eval-interval", "0", "--num-layers", "1", "--hidden-size", "64"]
    base = [claw, command, *common]
    if command == "rl":
        base += ["--model", "gpt2-tiny", "--prompt-data", os.path.join(tmp, "prompts.jsonl"),
                 "--global-batch-size", "8", "--num-generations", "4", "--max-new-tokens", "4"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = subprocess.run(base, capture_output=True, text=True, env=env, cwd=tmp)
    defaults = config(r.stdout + r.stderr)
    if r.returncode != 0 or not defaults:
        sys.exit(f"the base run failed (exit {r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")
    # The BLAS kernel claw would restart itself with, set once for every run.
    if m := re.search(r"restarting with OPENBLAS_CORETYPE=(\w+)", r.stderr):
        env["OPENBLAS_CORETYPE"] = m.group(1)
    given_in_base = {a[2:] for a in base if a.startswith("--")}
    if command == "rl":
        # claw train's flags are walked by its own case; here rl's own flags and
        # the shared ones rl's learner checks differently.
        t = subprocess.run([claw, "train", *common], capture_output=True, text=True, env=env, cwd=tmp)
        train_flags = set(config(t.stdout + t.stderr))
        if not train_flags:
            sys.exit(f"claw train {' '.join(common)} printed no configuration:\n{(t.stdout + t.stderr)[-2000:]}")
        shared_checked = {"fp16", "bf16", "main-params-dtype", "diloco-inner-steps", "lora-rank", "save", "load",
                          "load-hf", "finetune", "num-layers", "hidden-dropout", "keep-last-checkpoints"}
        given_in_base |= train_flags - shared_checked

    def check(name):
        value = alternative(name, defaults[name], tmp)
        if value is None:
            return name, "skip", f"no other value than the default {defaults[name]!r}"
        args = [f"--{name}"] + ([value] if value != "" else [])
        p = subprocess.run(base + args, capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
        out = p.stdout + p.stderr
        want = "true" if value == "" else value
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if p.returncode in (1, 2) and last.startswith("claw: error:"):
            if "step 1/" in out:
                return name, "FAIL", f"refused after a step ran: {last}"
            return name, "refused", last
        if p.returncode != 0:
            return name, "FAIL", f"exit {p.returncode} without a one-line error: {out[-600:]}"
        got = config(out).get(name)
        if got is None or not same(want, got):
            return name, "FAIL", f"accepted --{name} {want!r} but the configuration says {got!r}"
        return name, "applied", got

    names = [n for n in defaults if n not in given_in_base and n not in ("parameters", "gradients", "optimizer",
                                                                         "activations", "total")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("CLAW_TEST_JOBS", "2"))) as pool:
        results = list(pool.map(check, names))
    counts = {}
    for name, verdict, detail in results:
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{verdict:8s} --{name}: {detail}")
    print(f"claw {command}: {len(results)} flags: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    sys.exit(1 if counts.get("FAIL") else 0)


if __name__ == "__main__":
    main()
