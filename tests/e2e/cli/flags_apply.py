#!/usr/bin/env python3
"""Every flag of `claw train`, `rl`, `eval`, `generate` and `serve` applies or
is refused.

For each flag of the command's resolved configuration (the table it prints
before it runs: train and rl before allocating anything, eval once the
checkpoint's model is read, generate and serve once the model is loaded)
the test gives a value other than the default, alone on top of a small run
(train: --train-iters 0; eval, generate, serve: a one-layer checkpoint the
test trains first; serve is stopped once it has printed it), and requires
one of:
  - the run starts and its printed configuration shows the value given (so
    the value reached the configuration the command runs, and was not lost
    on the way, as --lora-rank once was under --load-hf); or
  - the command refuses it with a one-line `claw: error:` naming the flag,
    exit code 1 or 2, before any step.
A flag that is accepted but printed with another value fails the test, and
so does a flag of the command's --help that its configuration does not show.

    flags_apply.py CLAW_BINARY train|rl|eval|generate|serve
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

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
    "dtype": "bf16", "kv-cache-dtype": "bf16", "cache-type-k": "bf16", "cache-type-v": "bf16", "kv-cache-memory": "64MiB", "output-format": "json",
    "prompt": "c d", "prompt-tokens": "1,2,3", "stop": "zz", "host": "127.0.0.2", "api-key": "k",
    "max-body-size": "1MiB", "served-model-name": "m2",
}
# Flags that name something to read or write: a path made for the test.
PATHS = {"metrics-file": "m.jsonl", "tensorboard-dir": "tb", "peak-cache-dir": "peak", "save": "ck",
         "data-cache-path": "cache", "data-dir": "nodata", "load": "noload", "load-hf": "nohf",
         "data-path": "nodata/x", "vocab-file": "nodata/vocab.json", "merge-file": "nodata/merges.txt",
         "tokenizer-model": "nodata/tok.model", "prompt-data": "prompts2.jsonl", "eval-prompt-data": "prompts2.jsonl",
         "env-url": "http://127.0.0.1:9/", "reward-file": "nodata/r.py", "prompt-file": "prompt.txt",
         "logits-file": "logits.st", "grads-file": "grads.st"}
# Flags of a command's --help that its printed configuration need not show:
# the help, the config file and test hooks, and train's preset (named in the
# configuration's title).
NOT_PRINTED = {"help", "config", "test-fault", "model"}
# Flags printed as "(set)", not their value.
SECRETS = {"api-key"}


def help_flags(claw, command, env):
    out = subprocess.run([claw, command, "--help"], capture_output=True, text=True, env=env).stdout
    return {m.group(1) for m in re.finditer(r"^\s+(?:-\w,)?--([a-z0-9-]+)", out, re.M)}


def run_until_config(args, env, cwd, timeout=300):
    """A server: run until its configuration is printed, then SIGTERM it.
    (exit code, output); the code is 0 when it was stopped by the test."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    out, inside, stopped = [], False, False
    for line in p.stdout:
        out.append(line)
        if "resolved config" in line:
            inside = True
        elif inside and not line.startswith("  "):
            p.terminate()
            stopped = True
            break
    p.stdout.close()
    code = p.wait()
    timer.cancel()
    return (0 if stopped else code), "".join(out)


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
    with open(os.path.join(tmp, "prompt.txt"), "w") as f:
        f.write("e f")
    base = [claw, command, *common]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if command == "rl":
        base += ["--model", "gpt2-tiny", "--prompt-data", os.path.join(tmp, "prompts.jsonl"),
                 "--global-batch-size", "8", "--num-generations", "4", "--max-new-tokens", "4"]
    elif command in ("eval", "generate", "serve"):
        ck = os.path.join(tmp, "base")
        t = subprocess.run([claw, "train", *common, "--train-iters", "1", "--save", ck], capture_output=True,
                           text=True, env=env, cwd=tmp)
        if t.returncode != 0:
            sys.exit(f"training the checkpoint failed:\n{(t.stdout + t.stderr)[-2000:]}")
        base = {"eval": [claw, "eval", "--load", ck, "--eval-iters", "1", "--micro-batch-size", "2",
                         "--seq-length", "64", "--num-threads", "1"],
                "generate": [claw, "generate", "--model", ck, "--prompt", "a b", "--max-tokens", "2",
                             "--num-threads", "1"],
                "serve": [claw, "serve", "--model", ck, "--port", "0", "--num-threads", "1"]}[command]

    def run(args):
        if command == "serve":
            return run_until_config(args, env, tmp)
        p = subprocess.run(args, capture_output=True, text=True, env=env, cwd=tmp, timeout=300)
        return p.returncode, p.stdout + p.stderr

    code, out = run(base)
    defaults = config(out)
    if code != 0 or not defaults:
        sys.exit(f"the base run failed (exit {code}):\n{out[-2000:]}")
    # The BLAS kernel claw would restart itself with, set once for every run.
    if m := re.search(r"restarting with OPENBLAS_CORETYPE=(\w+)", out):
        env["OPENBLAS_CORETYPE"] = m.group(1)
    given_in_base = {a[2:] for a in base if a.startswith("--")}
    unseen = sorted(help_flags(claw, command, env) - set(defaults) - NOT_PRINTED - given_in_base)
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
        code, out = run(base + args)
        want = "true" if value == "" else "(set)" if name in SECRETS else value
        last = out.strip().splitlines()[-1] if out.strip() else ""
        if code in (1, 2) and last.startswith("claw: error:"):
            if "step 1/" in out:
                return name, "FAIL", f"refused after a step ran: {last}"
            return name, "refused", last
        if code != 0:
            return name, "FAIL", f"exit {code} without a one-line error: {out[-600:]}"
        got = config(out).get(name)
        if got is None or not same(want, got):
            return name, "FAIL", f"accepted --{name} {want!r} but the configuration says {got!r}"
        return name, "applied", got

    names = [n for n in defaults if n not in given_in_base and n not in ("parameters", "gradients", "optimizer",
                                                                         "activations", "total")]
    with concurrent.futures.ThreadPoolExecutor(max_workers=int(os.environ.get("CLAW_TEST_JOBS", "2"))) as pool:
        results = list(pool.map(check, names))
    results += [(name, "FAIL", "in --help but not in the printed configuration") for name in unseen]
    counts = {}
    for name, verdict, detail in results:
        counts[verdict] = counts.get(verdict, 0) + 1
        print(f"{verdict:8s} --{name}: {detail}")
    print(f"claw {command}: {len(results)} flags: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    sys.exit(1 if counts.get("FAIL") else 0)


if __name__ == "__main__":
    main()
