#!/usr/bin/env bash
# Distributed checkpoints through `claw train` (and `claw ckpt`) under mpirun.
#
#   ckpt.sh CLAW_BINARY CASE
#
# Runs are scheduled for 20 steps (30 for the long resume); a shortened one
# stops after step 3 (--exit-interval) and resumes for steps 4-6.
#
# reshard  save at TP 2 x PP 2 x DP 2 (sequence parallel, ZeRO-1, async) after
#          step 3, then resume at TP 1 x PP 4 x DP 2, TP 4, PP 2 x DP 2
#          with ZeRO-3... and on one rank: steps 4-6 equal the run that never
#          stopped (1e-6 relative; the layouts add in other orders).
# resume   stop and resume at the same layout: TP 2 x DP 2 ZeRO-1 async after
#          step 10, the 20 steps after the resume, validation included,
#          bitwise those of the run that never stopped; one rank, PP 2 x DP 2
#          ZeRO-1 and DP 2 ZeRO-3 after step 3, steps 4-6 bitwise.
# mutation one rank resumes without its optimizer state (--test-fault
#          skip-optimizer-load:1) at DP 2 ZeRO-1: the shortened resume must
#          not be bitwise the run that never stopped.
# faults   a writer killed mid-save (the hidden flag --test-fault
#          crash-in-save:ITER: the last rank SIGKILLs itself halfway through
#          its file of that iteration) leaves the previous checkpoint as
#          latest, and resuming from it is exact; a truncated and a
#          bit-flipped shard are refused naming the file and tensor, and
#          --load-fallback takes the previous checkpoint (also over a
#          missing or unparseable metadata.json); another model shape
#          is refused naming the tensor; --keep-last-checkpoints.
# frozen   --freeze: a run with the attention frozen stops after step 3 and
#          resumes bitwise (one rank; DP 2 ZeRO-1); its checkpoint holds every
#          parameter's values and no optimizer state for the frozen ones; a
#          run freezing the MLPs instead loads it, says that the attention's
#          optimizer state starts at zero, and leaves the MLPs as saved.
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
# shellcheck source=models.sh
source "$here/models.sh"  # byte_data: the built-in corpus in bytes
common=(--model gpt2-tiny --hidden-size 64 --num-attention-heads 4 --seq-length 32 --micro-batch-size 1
        --global-batch-size 8 --eval-interval 5 --eval-iters 2 --lr 2e-3 --lr-warmup-iters 3
        --hidden-dropout 0.1 --peak-gflops 100 --num-threads 1 "${byte_data[@]}")

# run NAME NP FLAGS...: claw train on NP ranks (1: no mpirun); log in $tmp/NAME.log.
run() {
  local name=$1 np=$2
  shift 2
  if [[ $np == 1 ]]; then
    timeout 300 "$claw" train "${common[@]}" "$@" --metrics-file "$tmp/$name.jsonl" >"$tmp/$name.log" 2>&1
  else
    timeout 300 "${mpirun[@]}" -np "$np" "$claw" train "${common[@]}" "$@" --metrics-file "$tmp/$name.jsonl" \
      </dev/null >"$tmp/$name.log" 2>&1
  fi
}
must_run() {
  run "$@" || { cat "$tmp/$1.log"; fail "$1: claw train ${*:3}"; }
}
# must_refuse NAME WANT FLAGS...: one rank, must fail before training saying WANT.
must_refuse() {
  local name=$1 want=$2
  shift 2
  run "$name" 1 "$@" && { cat "$tmp/$name.log"; fail "$name: claw train $* succeeded"; }
  grep -qF -- "$want" "$tmp/$name.log" || { cat "$tmp/$name.log"; fail "$name: the error does not say '$want'"; }
  grep -q "step 1/\|step 11/\|step 16/" "$tmp/$name.log" && fail "$name: training started"
  echo "ok $name: $(grep -m1 -o "error.*" "$tmp/$name.log" | cut -c1-240)"
}
compare() { /usr/bin/python3 "$here/compare_resume.py" "$@" || exit 1; }

case $case_name in
reshard)
  must_run ref 1 --train-iters 20 --exit-interval 6
  must_run save8 8 --train-iters 20 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    --sequence-parallel --use-distributed-optimizer --save "$tmp/ck" --save-interval 3 --exit-interval 3 --async-save
  [[ $(cat "$tmp/ck/latest_checkpointed_iteration.txt") == 3 ]] || fail "latest is not 3"
  "$claw" ckpt inspect "$tmp/ck" --verify || fail "claw ckpt inspect --verify"
  # The reader printed in docs/checkpoints.md rebuilds the tensors that
  # eight ranks wrote as TP slices and ZeRO ranges, equal to the checkpoint's
  # Hugging Face export.
  "$claw" ckpt export --load "$tmp/ck" --output "$tmp/hf" >/dev/null || fail "export"
  /usr/bin/python3 - "$here/../../../docs/checkpoints.md" "$tmp/ck/iter_0000003" "$tmp/hf" <<'EOF' || fail "doc reader"
import json, re, struct, sys
import numpy as np
doc, ckpt, hf = sys.argv[1:]
exec(re.search(r"```python\n(.*?)\n\nlatest =", open(doc).read(), re.S).group(1))
data = open(f"{hf}/model.safetensors", "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
def get(k):
    b, e = header[k]["data_offsets"]
    return np.frombuffer(data[8 + n + b:8 + n + e], np.float32).reshape(header[k]["shape"])
pairs = {"model.embedding.word_embeddings.weight": get("transformer.wte.weight"),
         "model.layers.1.mlp.fc.weight": get("transformer.h.1.mlp.c_fc.weight").T,
         "model.layers.3.attention.o_proj.weight": get("transformer.h.3.attn.c_proj.weight").T,
         "model.final_norm.bias": get("transformer.ln_f.bias")}
for name, want in pairs.items():
    assert np.array_equal(read_tensor(ckpt, name), want), name
print(f"ok the documented reader rebuilds {len(pairs)} tensors written by 8 ranks, equal to the HF export")
EOF
  while read -r np name flags; do
    [[ -z $np ]] && continue
    # shellcheck disable=SC2086
    must_run "$name" "$np" --train-iters 20 --exit-interval 6 --load "$tmp/ck" $flags
    grep -q "loaded .*iter_0000003" "$tmp/$name.log" || { cat "$tmp/$name.log"; fail "$name: no load line"; }
    compare "$tmp/ref.jsonl" "$tmp/$name.jsonl" "TP2xPP2xDP2 ZeRO-1 -> $name" 4 3 --rtol 1e-6
  done <<'RUNS'
8 tp1_pp4_dp2 --pipeline-model-parallel-size 4 --use-distributed-optimizer
4 tp4_pp1_dp1 --tensor-model-parallel-size 4
4 pp2_dp2 --pipeline-model-parallel-size 2
2 dp2_zero3 --zero-stage 3
1 single_rank
RUNS
  # claw eval of the checkpoint: the same loss on one rank and at TP 2 x PP 2.
  ev=(eval --load "$tmp/ck" --eval-iters 2 --micro-batch-size 2 --global-batch-size 4 --seq-length 32 --num-threads 1
      "${byte_corpus_data[@]}")
  "$claw" "${ev[@]}" >"$tmp/eval1.txt" 2>"$tmp/eval1.log" || { cat "$tmp/eval1.log"; fail "claw eval"; }
  timeout 300 "${mpirun[@]}" -np 4 "$claw" "${ev[@]}" --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \
    </dev/null >"$tmp/eval4.txt" 2>"$tmp/eval4.log" || { cat "$tmp/eval4.log"; fail "mpirun claw eval"; }
  /usr/bin/python3 - "$tmp/eval1.txt" "$tmp/eval4.txt" <<'EOF' || fail "claw eval differs between layouts"
import re, sys
a, b = (float(re.search(r"loss ([\d.]+)", open(p).read()).group(1)) for p in sys.argv[1:])
assert abs(a - b) <= 1e-6 * a, (a, b)
print(f"ok claw eval: loss {a:.6f} on one rank, {b:.6f} at TP 2 x PP 2")
EOF
  ;;
resume|mutation)
  # stop_and_resume NAME NP ASYNC STOP END [FLAGS...]: the run that never
  # stops (to END), the run stopped after STOP and the one resumed from its
  # checkpoint; with $fault, the resumed run gets --test-fault $fault.
  stop_and_resume() {
    local name=$1 np=$2 async=$3 stop=$4 end=$5
    shift 5
    local save=(--save "$tmp/$name" --save-interval "$((stop < 5 ? stop : 5))") to_end=(--train-iters "$end")
    ((end < 20)) && to_end=(--train-iters 20 --exit-interval "$end")
    [[ $async == async ]] && save+=(--async-save)
    must_run "${name}_ref" "$np" "${to_end[@]}" "$@"
    must_run "${name}_a" "$np" "${to_end[@]}" "$@" "${save[@]}" --exit-interval "$stop"
    compare "$tmp/${name}_ref.jsonl" "$tmp/${name}_a.jsonl" "$name before the stop" 1 "$stop" --bitwise
    must_run "${name}_b" "$np" "${to_end[@]}" "$@" --load "$tmp/$name" "${save[@]}" ${fault:+--test-fault "$fault"}
    grep -q "loaded .*iter_$(printf %07d "$stop")" "$tmp/${name}_b.log" ||
      { cat "$tmp/${name}_b.log"; fail "$name: no load line"; }
  }
  if [[ $case_name == mutation ]]; then
    fault=skip-optimizer-load:1 stop_and_resume dp2_zero1 2 sync 3 6 --use-distributed-optimizer
    grep -q -- "--test-fault skip-optimizer-load" "$tmp/dp2_zero1_b.log" || fail "the fault never took effect"
    /usr/bin/python3 "$here/compare_resume.py" "$tmp/dp2_zero1_ref.jsonl" "$tmp/dp2_zero1_b.jsonl" "mutant" 4 3 \
      --bitwise >"$tmp/cmp.log" 2>&1 && { cat "$tmp/cmp.log"; fail "a rank without its optimizer state went unnoticed"; }
    echo "ok: skip-optimizer-load:1 at DP 2 ZeRO-1 is caught in steps 4-6: $(grep -m1 AssertionError "$tmp/cmp.log")"
    exit 0
  fi
  stop_and_resume tp2_dp2_zero1 4 async 10 30 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
  compare "$tmp/tp2_dp2_zero1_ref.jsonl" "$tmp/tp2_dp2_zero1_b.jsonl" "tp2_dp2_zero1 resumed" 11 20 --bitwise
  while read -r np name async flags; do
    [[ -z $np ]] && continue
    # shellcheck disable=SC2086
    stop_and_resume "$name" "$np" "$async" 3 6 $flags
    compare "$tmp/${name}_ref.jsonl" "$tmp/${name}_b.jsonl" "$name resumed" 4 3 --bitwise
  done <<'RUNS'
1 single_rank sync
4 pp2_dp2_zero1 sync --pipeline-model-parallel-size 2 --use-distributed-optimizer
2 dp2_zero3 async --zero-stage 3
RUNS
  ;;
faults)
  must_run ref 2 --train-iters 20 --use-distributed-optimizer
  # A rank killed while writing iteration 10: the job dies, 5 stays latest.
  run crash 2 --train-iters 20 --use-distributed-optimizer --save "$tmp/ck" --save-interval 5 --async-save \
    --test-fault crash-in-save:10 && fail "the job survived a killed rank"
  [[ -d $tmp/ck/iter_0000010.partial && ! -e $tmp/ck/iter_0000010 ]] || { ls -la "$tmp/ck"; fail "crash layout"; }
  [[ $(cat "$tmp/ck/latest_checkpointed_iteration.txt") == 5 ]] || fail "latest is not 5 after the crash"
  echo "ok killed writer: $(ls "$tmp/ck" | tr '\n' ' ')"
  must_run resumed 2 --train-iters 20 --use-distributed-optimizer --load "$tmp/ck" --save "$tmp/ck" --save-interval 5
  grep -q "loaded .*iter_0000005" "$tmp/resumed.log" || { cat "$tmp/resumed.log"; fail "did not load iteration 5"; }
  [[ ! -e $tmp/ck/iter_0000010.partial ]] || fail "the stale .partial directory of iteration 10 is still there"
  compare "$tmp/ref.jsonl" "$tmp/resumed.jsonl" "resumed after the killed writer" 6 15 --bitwise

  # Damaged shards of the latest checkpoint (20): refused, or the previous one (15) with --load-fallback.
  cp -r "$tmp/ck" "$tmp/trunc"
  f=$tmp/trunc/iter_0000020/rank_00001.bin
  truncate -s $(($(stat -c %s "$f") / 2)) "$f"
  must_refuse truncated "rank_00001.bin: truncated: tensor '" --train-iters 25 --load "$tmp/trunc"
  run fallback 1 --train-iters 16 --load "$tmp/trunc" --load-fallback || { cat "$tmp/fallback.log"; fail "fallback"; }
  grep -q "loaded .*iter_0000015" "$tmp/fallback.log" || { cat "$tmp/fallback.log"; fail "no fallback to 15"; }
  echo "ok fallback: $(grep -m1 -o "checkpoint .*unreadable.*" "$tmp/fallback.log")"
  # The latest checkpoint's metadata.json missing, or unparseable: refused, or 15 with --load-fallback.
  cp -r "$tmp/ck" "$tmp/nometa"
  rm "$tmp/nometa/iter_0000020/metadata.json"
  must_refuse nometa "no complete checkpoint of iteration 20 (complete checkpoints: 5, 10, 15)" --train-iters 25 \
    --load "$tmp/nometa"
  run nometa_fallback 1 --train-iters 16 --load "$tmp/nometa" --load-fallback ||
    { cat "$tmp/nometa_fallback.log"; fail "fallback over a missing metadata.json"; }
  grep -q "loaded .*iter_0000015" "$tmp/nometa_fallback.log" || { cat "$tmp/nometa_fallback.log"; fail "no fallback to 15"; }
  echo "ok fallback: $(grep -m1 -o "iteration 20 (the latest) has no metadata.json.*" "$tmp/nometa_fallback.log")"
  cp -r "$tmp/ck" "$tmp/badmeta"
  echo '{"iteration": 20, ' >"$tmp/badmeta/iter_0000020/metadata.json"
  run badmeta_fallback 1 --train-iters 16 --load "$tmp/badmeta" --load-fallback ||
    { cat "$tmp/badmeta_fallback.log"; fail "fallback over an unparseable metadata.json"; }
  grep -q "loaded .*iter_0000015" "$tmp/badmeta_fallback.log" || { cat "$tmp/badmeta_fallback.log"; fail "no fallback to 15"; }
  echo "ok fallback over an unparseable metadata.json"
  cp -r "$tmp/ck" "$tmp/flip"
  f=$tmp/flip/iter_0000020/rank_00000.bin
  /usr/bin/python3 - "$f" <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(1000)
    b = f.read(1)
    f.seek(1000)
    f.write(bytes([b[0] ^ 0x10]))
EOF
  must_refuse bitflip "rank_00000.bin: checksum mismatch in tensor 'model." --train-iters 25 --load "$tmp/flip"
  "$claw" ckpt inspect "$tmp/flip" --verify >"$tmp/verify.log" 2>&1 && fail "inspect --verify passed a flipped bit"
  grep -q "checksum mismatch" "$tmp/verify.log" || { cat "$tmp/verify.log"; fail "inspect --verify message"; }

  # Another model shape: the checkpoint's is the model's, a flag that disagrees names both values.
  must_refuse wider "--hidden-size 128 disagrees with checkpoint $tmp/ck/iter_0000020, whose model has --hidden-size 64" \
    --train-iters 25 --load "$tmp/ck" --hidden-size 128
  must_refuse shallower "--num-layers 2 disagrees with checkpoint $tmp/ck/iter_0000020, whose model has --num-layers 4" \
    --train-iters 25 --load "$tmp/ck" --num-layers 2
  must_refuse deeper "--num-layers 8 disagrees with checkpoint $tmp/ck/iter_0000020, whose model has --num-layers 4" \
    --train-iters 25 --load "$tmp/ck" --num-layers 8
  must_refuse no_step "no complete checkpoint of iteration 7 (complete checkpoints: 5, 10, 15, 20)" \
    --train-iters 25 --load "$tmp/ck" --ckpt-step 7

  # Bad commands name the flag.
  "$claw" eval --data-path x >"$tmp/e.log" 2>&1 && fail "claw eval without --load"
  grep -q "claw eval: --load DIR" "$tmp/e.log" || { cat "$tmp/e.log"; fail "eval message"; }
  "$claw" ckpt export --load "$tmp/ck" --format onnx --output "$tmp/x" >"$tmp/e.log" 2>&1 && fail "--format onnx"
  grep -q "\-\-format 'onnx' is not supported (hf" "$tmp/e.log" || { cat "$tmp/e.log"; fail "format message"; }
  "$claw" ckpt inspect "$tmp/nowhere" >"$tmp/e.log" 2>&1 && fail "inspect of a missing directory"
  grep -q "claw ckpt inspect .*nowhere: no such directory" "$tmp/e.log" || { cat "$tmp/e.log"; fail "inspect message"; }
  echo "ok bad commands: $(cat "$tmp/e.log")"

  # --keep-last-checkpoints 2 keeps 15 and 20.
  must_run keep 1 --train-iters 20 --save "$tmp/keep" --save-interval 5 --keep-last-checkpoints 2
  [[ $(ls "$tmp/keep" | tr '\n' ' ') == "iter_0000015 iter_0000020 latest_checkpointed_iteration.txt " ]] ||
    { ls "$tmp/keep"; fail "keep-last"; }
  echo "ok keep-last: $(ls "$tmp/keep" | tr '\n' ' ')"
  ;;
frozen)
  while read -r np name flags; do
    [[ -z $np ]] && continue
    f=(--train-iters 20 --exit-interval 6 --freeze 'layers.*.attention.*')
    # shellcheck disable=SC2086
    must_run "fz_${name}_ref" "$np" "${f[@]}" $flags
    # shellcheck disable=SC2086
    must_run "fz_${name}_a" "$np" "${f[@]}" $flags --save "$tmp/fz_$name" --save-interval 3 --exit-interval 3
    compare "$tmp/fz_${name}_ref.jsonl" "$tmp/fz_${name}_a.jsonl" "frozen $name before the stop" 1 3 --bitwise
    # shellcheck disable=SC2086
    must_run "fz_${name}_b" "$np" "${f[@]}" $flags --load "$tmp/fz_$name"
    grep -q "loaded .*iter_0000003" "$tmp/fz_${name}_b.log" || { cat "$tmp/fz_${name}_b.log"; fail "$name: no load"; }
    compare "$tmp/fz_${name}_ref.jsonl" "$tmp/fz_${name}_b.jsonl" "frozen $name resumed" 4 3 --bitwise
  done <<'RUNS'
1 single_rank
2 dp2_zero1 --use-distributed-optimizer
RUNS
  must_run fz_swap 1 --train-iters 20 --exit-interval 6 --freeze 'layers.*.mlp.*' --load "$tmp/fz_single_rank" \
    --save "$tmp/fz_swap"
  grep -qF "has no optimizer state for 32 parameter(s) that train now (frozen when it was saved?): theirs starts at zero: layers.0.attention.q_proj.weight" \
    "$tmp/fz_swap.log" || { cat "$tmp/fz_swap.log"; fail "no line about the attention's fresh optimizer state"; }
  /usr/bin/python3 - "$here/../../../docs/checkpoints.md" "$tmp/fz_single_rank/iter_0000003" \
    "$tmp/fz_swap/iter_0000006" <<'EOF' || fail "frozen checkpoints"
import json, re, sys
import numpy as np
doc, saved, swapped = sys.argv[1:]
exec(re.search(r"```python\n(.*?)\n\nlatest =", open(doc).read(), re.S).group(1))
names = {t["name"] for t in json.load(open(f"{saved}/metadata.json"))["tensors"]}
params = sorted(n[len("model."):] for n in names if n.startswith("model."))
attention = [p for p in params if ".attention." in p]
mlp = [p for p in params if ".mlp." in p]
assert len(attention) == 32 and len(mlp) == 16, (len(attention), len(mlp))
for p in params:  # values of every parameter; moments of the trainable ones only
    for state in ("exp_avg", "exp_avg_sq"):
        assert (f"optim.{state}.{p}" in names) == (p not in attention), (state, p)
for p in mlp:  # frozen after the swap: as saved
    assert np.array_equal(read_tensor(saved, "model." + p), read_tensor(swapped, "model." + p)), p
for p in attention:  # trained after the swap
    assert not np.array_equal(read_tensor(saved, "model." + p), read_tensor(swapped, "model." + p)), p
print(f"ok frozen checkpoints: {len(attention)} frozen tensors saved without optimizer state; "
      f"after the swap the {len(mlp)} MLP tensors are bitwise as saved and the attention trained")
EOF
  ;;
*)
  fail "unknown case $case_name"
  ;;
esac
