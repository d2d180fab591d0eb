#!/usr/bin/env bash
# `claw plan` and `claw train --parallel auto` end to end.
#
#   plan.sh CLAW_BINARY CASE
#
# json        --json lists ranked layouts with the documented fields, fastest
#             first, all fitting; a model given by its shape alone; a pinned
#             layout is evaluated, not searched; a TOML train config as --model.
# bad_input   one-line errors naming the flag: unknown device or model, counts
#             that do not factor, contradictory flags, an impossible request
#             (what is missing, and the largest device in the catalog).
# precision   the planner reads the dtypes: under --precision fp8, blocks
#             kept in bf16 (--fp8-high-precision-layers, or --load's
#             checkpoint choice from --fp8-layer-selection auto) cost bf16
#             time, so tokens/s falls as more blocks leave FP8; 16-bit
#             moments (--exp-avg-dtype, --exp-avg-sq-dtype) shrink the
#             optimizer's bytes by their share; bad lists name the flag.
# train_auto  mpirun -np 4 claw train --parallel auto: the planner picks a
#             layout for 4 ranks, which trains to the single-rank losses; a
#             pinned PP or CP size is kept.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2

expect_error() {  # expect_error PATTERN ARGS...: claw plan fails with a last line matching PATTERN
  local pattern=$1
  shift
  local out rc last
  out=$("$claw" plan "$@" 2>&1)
  rc=$?
  last=$(printf '%s\n' "$out" | tail -n 1)
  [[ $rc -ne 0 ]] || fail "claw plan $* succeeded"
  [[ $last == "claw: error: "* ]] || fail "last line is not a claw error: $last"
  grep -qE -- "$pattern" <<<"$last" || fail "error does not match /$pattern/: $last"
  echo "ok: $last"
}

case $case_name in
json)
  "$claw" plan --model llama3-70b --num-gpus 64 --seq-length 4096 --global-batch-size 128 --json --top 20 \
    >"$tmp/70b.json" || fail "claw plan llama3-70b"
  "$claw" plan --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 11008 --swiglu \
    --vocab-size 32000 --normalization RMSNorm --position-embedding-type rope --disable-bias-linear \
    --untie-embeddings-and-output-weights --seq-length 4096 --num-gpus 8 --global-batch-size 64 --device a100 --json \
    >"$tmp/shape.json" || fail "claw plan by shape"
  "$claw" plan --model llama3-70b --num-gpus 64 --seq-length 4096 --global-batch-size 128 --json \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 5 \
    --micro-batch-size 1 --use-distributed-optimizer --recompute-granularity none >"$tmp/pinned.json" ||
    fail "claw plan pinned"
  printf 'model = "gpt2-124m"\nseq-length = 1024\nglobal-batch-size = 32\nlr = 3e-4\n' >"$tmp/cfg.toml"
  "$claw" plan --model "$tmp/cfg.toml" --num-gpus 4 --device cpu --gpus-per-node 4 --json >"$tmp/toml.json" ||
    fail "claw plan --model cfg.toml"
  /usr/bin/python3 - "$tmp" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
need = ["tensor_model_parallel_size", "pipeline_model_parallel_size", "data_parallel_size", "micro_batch_size",
        "memory_bytes_per_device", "step_time_s", "tokens_per_s", "model_tflops_per_device",
        "hardware_tflops_per_device", "mfu"]
def load(name):
    with open(f"{d}/{name}.json") as f:
        return json.load(f)
r = load("70b")
L = r["layouts"]
assert len(L) == 20, len(L)
for x in L:
    for k in need:
        assert k in x, k
    assert x["fits"] and x["memory_bytes_per_device"] <= 80 * 2**30
    t, p, c, dp = (x["tensor_model_parallel_size"], x["pipeline_model_parallel_size"], x["context_parallel_size"],
                   x["data_parallel_size"])
    assert t * p * c * dp == 64 and t <= 8
    b = x["step_time_breakdown_s"]
    assert abs(x["tokens_per_s"] - 128 * 4096 / x["step_time_s"]) < 1e-6 * x["tokens_per_s"]
    assert 0 < x["mfu"] < 1 and x["hardware_tflops_per_device"] >= x["model_tflops_per_device"]
    m = x["memory_breakdown_bytes"]
    parts = (m["params"] + m["grads"] + m["optimizer"] + m["zero_buffers"] + m["activations"] + m["comm_buffers"]
             + m["runtime"])
    assert abs(parts - x["memory_bytes_per_device"]) < 1
tps = [x["tokens_per_s"] for x in L]
assert all(a >= b * 0.994 for a, b in zip(tps, tps[1:])), tps
s = load("shape")
assert abs(s["num_params"] - 6.74e9) < 0.02e9, s["num_params"]   # Llama-2-7B's shape
assert s["layouts"], "nothing fits"
p = load("pinned")
assert p["considered"] == 1 and len(p["layouts"]) == 1, p["considered"]
x = p["layouts"][0]
assert (x["tensor_model_parallel_size"], x["pipeline_model_parallel_size"], x["virtual_pipeline_model_parallel_size"],
        x["micro_batch_size"], x["zero_stage"], x["recompute_granularity"]) == (4, 4, 4, 1, 1, "none"), x
t = load("toml")
assert t["model"] == "gpt2-124m" and t["seq_length"] == 1024 and t["global_batch_size"] == 32, t
print("ok: 70b top", L[0]["layout"], f'{L[0]["tokens_per_s"]:.0f} tok/s', f'MFU {L[0]["mfu"]:.3f};',
      "shape-only", s["layouts"][0]["layout"], "; pinned", x["layout"])
PY
  ;;
bad_input)
  base=(--model llama3-8b --num-gpus 16 --seq-length 4096 --global-batch-size 64)
  expect_error "--device h800: not in the hardware catalog; known devices: a100, b200, cpu, h100, h200" \
    "${base[@]}" --device h800
  expect_error "unknown model preset|not a model preset|valid presets|preset" --model llama9-1t --num-gpus 8 \
    --global-batch-size 8
  expect_error "--num-gpus 12 is not a whole number of nodes of --gpus-per-node 8" --model llama3-8b --num-gpus 12 \
    --global-batch-size 48
  expect_error "--use-distributed-optimizer means ZeRO stage 1 but --zero-stage 3" "${base[@]}" \
    --use-distributed-optimizer --zero-stage 3
  expect_error "--sequence-parallel and --no-sequence-parallel contradict" "${base[@]}" --sequence-parallel \
    --no-sequence-parallel
  expect_error "--inter-dc-gbps / --inter-dc-rtt-ms describe a link between data centres" "${base[@]}" \
    --inter-dc-gbps 100
  expect_error "--data-centers 3 does not divide the 2 nodes" "${base[@]}" --data-centers 3 --inter-dc-gbps 100
  expect_error "--tensor-model-parallel-size 3 does not divide --num-attention-heads 32" "${base[@]}" --tensor-model-parallel-size 3
  expect_error "--global-batch-size is required" --model llama3-8b --num-gpus 8
  expect_error "needs at least [0-9.]+ GiB per device at any layout .*; h100 has 80.0 GiB \(largest in the catalog: b200, 180.0 GiB\)" \
    --model llama3-405b --num-gpus 8 --seq-length 8192 --global-batch-size 8
  expect_error "device cpu has no peak for dtype bf16" "${base[@]}" --device cpu --precision bf16
  printf '[device.bad]\nname = "x"\nmemory_gib = 8\n' >"$tmp/hw.toml"
  expect_error "--hardware-catalog .*hw.toml \[device.bad\]: missing field memory_gbs" "${base[@]}" \
    --hardware-catalog "$tmp/hw.toml"
  ;;
train_auto)
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  common=(--model gpt2-tiny --hidden-size 64 --num-attention-heads 4 --seq-length 32 --global-batch-size 8
          --train-iters 10 --eval-interval 5 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 3 --peak-gflops 100
          --num-threads 1)
  "$claw" train "${common[@]}" --micro-batch-size 8 --metrics-file "$tmp/one.jsonl" >"$tmp/one.log" 2>&1 ||
    { cat "$tmp/one.log"; fail "single-rank run"; }
  timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$claw" train "${common[@]}" --parallel auto \
    --metrics-file "$tmp/auto.jsonl" </dev/null >"$tmp/auto.log" 2>&1 || { cat "$tmp/auto.log"; fail "--parallel auto"; }
  grep "plan: --parallel auto: " "$tmp/auto.log" || { head -20 "$tmp/auto.log"; fail "no plan line"; }
  /usr/bin/python3 "$here/../parallel/compare_metrics.py" "$tmp/one.jsonl" "$tmp/auto.jsonl" "parallel_auto" 10 || exit 1
  # A pinned part stays pinned.
  timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$claw" train "${common[@]}" --parallel auto \
    --pipeline-model-parallel-size 2 --train-iters 2 --eval-interval 0 </dev/null >"$tmp/pinned.log" 2>&1 ||
    { cat "$tmp/pinned.log"; fail "--parallel auto with PP pinned"; }
  grep -qE "plan: --parallel auto: TP[0-9](\+SP)? PP2" "$tmp/pinned.log" || fail "PP 2 was not kept"
  timeout 300 mpirun --oversubscribe --bind-to none -np 4 "$claw" train "${common[@]}" --parallel auto \
    --context-parallel-size 2 --train-iters 2 --eval-interval 0 </dev/null >"$tmp/cp.log" 2>&1 ||
    { cat "$tmp/cp.log"; fail "--parallel auto with CP pinned"; }
  grep -qE "plan: --parallel auto: .*CP2" "$tmp/cp.log" || { grep plan: "$tmp/cp.log"; fail "CP 2 was not kept"; }
  ;;
precision)
  pinned=(--model gpt2-124m --num-gpus 8 --global-batch-size 64 --tensor-model-parallel-size 1
          --pipeline-model-parallel-size 1 --micro-batch-size 8 --json)
  "$claw" plan "${pinned[@]}" --precision fp8 >"$tmp/fp8.json" || fail "fp8"
  "$claw" plan "${pinned[@]}" --precision fp8 --fp8-high-precision-layers 0,11 >"$tmp/fp8_2.json" || fail "fp8, 2 in bf16"
  "$claw" plan "${pinned[@]}" --precision fp8 --fp8-high-precision-layers 0,1,2,3,4,5,6,7,8,9,10,11 \
    >"$tmp/fp8_12.json" || fail "fp8, all blocks in bf16"
  "$claw" plan "${pinned[@]}" --precision bf16 >"$tmp/bf16.json" || fail "bf16"
  "$claw" plan "${pinned[@]}" --precision bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 >"$tmp/bf16m.json" ||
    fail "bf16 moments"
  "$claw" plan "${pinned[@]}" --precision bf16 --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8 >"$tmp/bf16m8.json" ||
    fail "fp8 moments"
  "$claw" plan "${pinned[@]}" --precision bf16 --main-params-dtype fp16 >"$tmp/bf16f16.json" || fail "fp16 main params"
  cpu=(--model gpt2-tiny --device cpu --num-gpus 1 --global-batch-size 8 --micro-batch-size 8 --json)
  "$claw" plan "${cpu[@]}" >"$tmp/cpu.json" || fail "claw's trainer, fp32"
  "$claw" plan "${cpu[@]}" --main-params-dtype fp16 >"$tmp/cpuf16.json" || fail "claw's trainer, fp16 masters"
  /usr/bin/python3 - "$tmp" <<'PY' || fail "the planner's precision model"
import json, sys
d = sys.argv[1]
tps = {k: json.load(open(f"{d}/{k}.json"))["layouts"][0]["tokens_per_s"] for k in ("fp8", "fp8_2", "fp8_12", "bf16")}
print("tokens/s:", tps)
assert tps["fp8"] > tps["fp8_2"] > tps["fp8_12"] >= tps["bf16"], tps
opt = {k: json.load(open(f"{d}/{k}.json"))["layouts"][0]["memory_breakdown_bytes"]["optimizer"] for k in ("bf16", "bf16m")}
# Megatron's bf16: 4 B main params + 8 B moments per parameter; bf16 moments make it 4 + 4.
assert abs(opt["bf16m"] / opt["bf16"] - 8 / 12) < 1e-6, opt
print("optimizer bytes, fp32 and bf16 moments:", opt)
# FP8 moments: 1 B each plus a 4 B scale per 128 elements.
f8 = json.load(open(f"{d}/bf16m8.json"))["layouts"][0]["memory_breakdown_bytes"]["optimizer"]
assert abs(f8 / opt["bf16"] - (4 + 2 * (1 + 4 / 128)) / 12) < 1e-5, (f8, opt)
# fp16 main params: Megatron's master copy 4 -> 2 B of the 12 in the optimizer row.
f16 = json.load(open(f"{d}/bf16f16.json"))["layouts"][0]["memory_breakdown_bytes"]["optimizer"]
assert abs(f16 / opt["bf16"] - 10 / 12) < 1e-6, (f16, opt)
# claw's trainer: the parameters are the masters; fp16 halves them and adds fp32 working copies.
cpu = {k: json.load(open(f"{d}/{k}.json"))["layouts"][0]["memory_breakdown_bytes"] for k in ("cpu", "cpuf16")}
assert abs(cpu["cpuf16"]["params"] / cpu["cpu"]["params"] - 0.5) < 1e-6, cpu
assert cpu["cpuf16"]["zero_buffers"] > cpu["cpu"]["zero_buffers"], cpu
print("claw's trainer, fp32 and fp16 masters:", {k: (v["params"], v["zero_buffers"]) for k, v in cpu.items()})
PY
  # The choice saved by --fp8-layer-selection auto, read back by --load.
  "$claw" train --model gpt2-tiny --num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 \
    --micro-batch-size 2 --global-batch-size 2 --train-iters 1 --eval-interval 0 --num-threads 1 --peak-gflops 100 \
    --fp8-format hybrid --fp8-layer-selection auto --fp8-bf16-layer-budget 1 --save "$tmp/ckpt" >"$tmp/train.log" 2>&1 ||
    { cat "$tmp/train.log"; fail "train with the automatic FP8 choice"; }
  chosen=$(grep -o "blocks kept out of FP8: .*" "$tmp/train.log" | tail -1 | sed 's/.*: //')
  "$claw" plan --model gpt2-tiny --num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-gpus 8 \
    --global-batch-size 64 --precision fp8 --load "$tmp/ckpt" >"$tmp/plan.log" 2>&1 || { cat "$tmp/plan.log"; fail "--load"; }
  grep -q "FP8 layer choice from .*: blocks kept in bf16: $chosen\$" "$tmp/plan.log" ||
    { head -3 "$tmp/plan.log"; fail "--load did not read the choice '$chosen'"; }
  echo "ok: the planner read the checkpoint's choice (blocks $chosen in bf16)"
  base=(--model gpt2-124m --num-gpus 8 --global-batch-size 64)
  expect_error "fp8-high-precision-layers 0,x: 'x' is not a block index" "${base[@]}" --precision fp8 \
    --fp8-high-precision-layers 0,x
  expect_error "needs --precision fp8" "${base[@]}" --precision bf16 --fp8-high-precision-layers 0
  expect_error "block 12 is not one of the model's 12 layers" "${base[@]}" --precision fp8 --fp8-high-precision-layers 12
  expect_error "exp-avg-dtype fp4: expected fp32, bf16, fp16 or fp8" "${base[@]}" --exp-avg-dtype fp4
  expect_error "main-params-dtype bf16: expected fp32 or fp16" "${base[@]}" --main-params-dtype bf16
  ;;
*) fail "unknown case $case_name" ;;
esac
