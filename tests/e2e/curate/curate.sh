#!/usr/bin/env bash
# `claw curate` through the CLI: bad input gives a one-line error naming the
# file and line or key (or a count with --skip-bad-lines); a run stopped by
# SIGTERM resumes to the same output as an uninterrupted one; shards split
# between the tasks of a Slurm job array, then merged, give the same output
# as one task, with the tasks' environment as given and under a
# one-machine Slurm (sbatch --array, then a merge job).
#   curate.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the built-in data directory}

fail() { echo "FAIL: $*"; printf '%s\n' "${out:-}" | tail -5; exit 1; }
config() {  # config INPUT_PATH OUTPUT_DIR STAGES...: writes $tmp/p.toml
  local in=$1 dir=$2
  shift 2
  { printf '[input]\npaths = ["%s"]\n[output]\ndir = "%s"\n' "$in" "$dir"; printf '%s\n' "$@"; } >"$tmp/p.toml"
}
run() {  # run ARGS...: sets out (stdout + stderr), rc
  out=$("$claw" curate "$@" 2>&1)
  rc=$?
}
expect_error() {  # expect_error PATTERN
  local last
  last=$(printf '%s\n' "$out" | tail -n 1)
  [[ $rc -ne 0 ]] || fail "exit code 0"
  [[ $last == "claw: error: "* ]] || fail "last line is not a claw error: $last"
  grep -qE -- "$1" <<<"$last" || fail "error does not match /$1/: $last"
  [[ ! -e $tmp/out/shard_00000.jsonl.zst ]] || fail "a shard was written"
  echo "ok: $last"
}
# Several shards of real text: the State of the Union corpus cut into
# 4-sentence documents, with a few duplicates and some personal data.
make_corpus() {  # make_corpus DIR SHARDS
  /usr/bin/python3 - "$data/sotu" "$1" "$2" <<'PY'
import glob, json, os, sys
src, out, shards = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(out, exist_ok=True)
docs = []
for path in sorted(glob.glob(os.path.join(src, "*.txt"))):  # the speeches scripts/fetch-data unpacks
    s = open(path, encoding="utf-8").read().split(". ")
    docs += [". ".join(s[i:i + 4]) + "." for i in range(0, len(s) - 3, 4)]
for i in range(0, len(docs), 97):
    docs[i] += " Write to press.office@example.gov or call 202-555-0143."
docs += docs[:300]
per = (len(docs) + shards - 1) // shards
for k in range(shards):
    with open(os.path.join(out, f"part{k:02}.jsonl"), "w") as f:
        for j, d in enumerate(docs[k * per:(k + 1) * per]):
            f.write(json.dumps({"id": f"{k}-{j}", "text": d}) + "\n")
PY
}
stages=('[[stage]]' 'kind = "clean"' '[[stage]]' 'kind = "pii"' '[[stage]]' 'kind = "exact_dedup"')
same_output() {  # same_output DIR_A DIR_B: every shard and removed file equal
  local f n=0
  for f in "$1"/shard_*.jsonl.zst "$1"/removed/*.jsonl.zst; do
    cmp -s "$f" "$2/${f#"$1"/}" || fail "${f#"$1"/} differs"
    n=$((n + 1))
  done
  [[ $n -gt 0 ]] || fail "no output in $1"
  echo "$n"
}

case $case_name in
  bad_input)
    printf '{"text": "ok"}\n{"text": "bad \xff"}\n' >"$tmp/utf8.jsonl"
    config "$tmp/utf8.jsonl" "$tmp/out"
    run --config "$tmp/p.toml"
    expect_error "utf8.jsonl:2: invalid UTF-8 .*--skip-bad-lines"
    printf '{"text": "ok"}\n{"text": "x"\n' >"$tmp/json.jsonl"
    config "$tmp/json.jsonl" "$tmp/out"
    run --config "$tmp/p.toml"
    expect_error "json.jsonl:2: malformed JSON"
    printf '{"body": "ok"}\n' >"$tmp/key.jsonl"
    config "$tmp/key.jsonl" "$tmp/out"
    run --config "$tmp/p.toml"
    expect_error "key.jsonl:1: no key \"text\" .*text_key"
    : >"$tmp/empty.jsonl"
    config "$tmp/empty.jsonl" "$tmp/out"
    run --config "$tmp/p.toml"
    expect_error "empty.jsonl: the file is empty"
    config "$tmp/key.jsonl" "$tmp/out" '[[stage]]' 'kind = "gopher"'
    run --config "$tmp/p.toml"
    expect_error "p.toml: \[\[stage\]\] 1: unknown kind \"gopher\" \(valid: clean, pii"
    config "$tmp/key.jsonl" "$tmp/out" '[[stage]]' 'kind = "pii"' 'mail = false'
    run --config "$tmp/p.toml"
    expect_error "p.toml \[\[stage\]\] 1 \(pii\): unknown key 'mail'"
    printf '[input]\npaths = ["x"]\n[output\n' >"$tmp/p.toml"
    run --config "$tmp/p.toml"
    expect_error "p.toml:3:"
    run --config "$tmp/missing.toml"
    expect_error "--config .*missing.toml"
    printf '{"text": "ok"}\nnot json\n{"text": 5}\n\n{"text": "fine"}\n' >"$tmp/mixed.jsonl"
    config "$tmp/mixed.jsonl" "$tmp/out"
    run --config "$tmp/p.toml" --skip-bad-lines
    [[ $rc -eq 0 ]] || fail "--skip-bad-lines: exit code $rc"
    grep -q "2 documents in -> 2 out (100.0% kept).* 2 bad lines skipped, 1 blank" <<<"$out" || fail "counts: $out"
    echo "ok: --skip-bad-lines counts 2 bad lines"
    # A UTF-8 byte order mark before the first record, with a deduplication
    # stage (whose segments wrap each record in another JSON object): read
    # as the record it precedes, not an internal error.
    printf '\xef\xbb\xbf{"text": "first document", "id": "a"}\n{"text": "second document", "id": "b"}\n' >"$tmp/bom.jsonl"
    config "$tmp/bom.jsonl" "$tmp/bom_out" '[[stage]]' 'kind = "exact_dedup"'
    run --config "$tmp/p.toml"
    [[ $rc -eq 0 ]] || fail "a BOM before the first record: exit code $rc"
    zstdcat "$tmp/bom_out/shard_00000.jsonl.zst" | head -n 1 | grep -q '^{"id":"a","text":"first document"}$' ||
      fail "the first record after a BOM: $(zstdcat "$tmp/bom_out/shard_00000.jsonl.zst" | head -n 1)"
    echo "ok: a BOM before the first record"
    # A record of 100,000 nested brackets, with a deduplication stage: a bad
    # line named with its reason (exit 1), not a stack overflow; skipped
    # with --skip-bad-lines.
    /usr/bin/python3 -c 'print("{\"text\": \"ok\"}"); print("{\"text\": \"x\", \"n\": " + "[" * 100000 + "]" * 100000 + "}")' >"$tmp/deep.jsonl"
    rm -rf "$tmp/out"
    config "$tmp/deep.jsonl" "$tmp/out" '[[stage]]' 'kind = "exact_dedup"'
    run --config "$tmp/p.toml"
    expect_error "deep.jsonl:2: JSON nested deeper than 512 levels at byte 530"
    config "$tmp/deep.jsonl" "$tmp/deep_out2" '[[stage]]' 'kind = "exact_dedup"'
    run --config "$tmp/p.toml" --skip-bad-lines
    [[ $rc -eq 0 ]] || fail "a deep record skipped: exit code $rc: $out"
    echo "ok: a record nested 100,000 deep is a bad line" ;;
  interrupted_resume)
    make_corpus "$tmp/in" 6
    config "$tmp/in" "$tmp/whole" "${stages[@]}"
    run --config "$tmp/p.toml" --threads 2
    [[ $rc -eq 0 ]] || fail "uninterrupted run: exit code $rc"
    dups=$(grep -oE "^3   exact_dedup .* duplicates=[0-9]+" <<<"$out" | grep -oE "[0-9]+$")
    [[ ${dups:-0} -ge 300 ]] || fail "the 300 planted duplicates not all found: $out"
    grep -qE "^2   pii .* email=[0-9]+ phone=[0-9]+" <<<"$out" || fail "pii counts: $out"
    config "$tmp/in" "$tmp/resumed" "${stages[@]}"
    # One thread and small chunks: slow enough to stop part way.
    "$claw" curate --config "$tmp/p.toml" --threads 1 >"$tmp/first.log" 2>&1 &
    pid=$!
    for _ in $(seq 200); do
      [[ -n $(ls "$tmp/resumed/stats" 2>/dev/null) ]] && break
      sleep 0.02
    done
    kill -TERM $pid
    wait $pid
    rc=$?
    out=$(cat "$tmp/first.log")
    [[ $rc -ne 0 ]] || fail "the stopped run exited 0 (it finished before the signal; make the corpus larger)"
    grep -q "interrupted by signal 15 (SIGTERM); finished shards are kept" <<<"$out" || fail "no interruption message"
    done_before=$(ls "$tmp/resumed/stats" | wc -l)
    ls "$tmp/resumed" | grep -q '\.tmp\.' && fail "a temporary was left behind"
    run --config "$tmp/p.toml" --threads 2
    [[ $rc -eq 0 ]] || fail "resumed run: exit code $rc"
    grep -qE "\(([1-9][0-9]*) resumed\)" <<<"$out" || fail "nothing resumed: $out"
    n=$(same_output "$tmp/whole" "$tmp/resumed") || exit 1
    echo "ok: stopped after $done_before shard(s) done, resumed; $n output files equal the uninterrupted run's" ;;
  slurm_tasks)
    # MinHash here (exact dedup in slurm_array): both kinds of fingerprint
    # (signatures: without verification, which reads the texts in the merge).
    stages=('[[stage]]' 'kind = "clean"' '[[stage]]' 'kind = "minhash_dedup"' 'verify = false' '[[stage]]' 'kind = "pii"')
    make_corpus "$tmp/in" 5
    config "$tmp/in" "$tmp/one" "${stages[@]}"
    run --config "$tmp/p.toml"
    [[ $rc -eq 0 ]] || fail "one task: exit code $rc"
    config "$tmp/in" "$tmp/array" "${stages[@]}"
    for t in 0 1 2; do
      out=$(SLURM_ARRAY_TASK_COUNT=3 SLURM_ARRAY_TASK_ID=$t "$claw" curate --config "$tmp/p.toml" 2>&1) ||
        fail "task $t failed"
      grep -q "task $t of 3: done with its shards and their fingerprints" <<<"$out" || fail "task $t: $out"
    done
    [[ $(ls "$tmp/array/work" | grep -c "fingerprints_shard") -eq 5 ]] || fail "no fingerprints from the tasks"
    [[ $(ls "$tmp/array/stats" | wc -l) -eq 5 ]] || fail "the tasks did not split the 5 shards: $(ls "$tmp/array/stats")"
    run --config "$tmp/p.toml"
    [[ $rc -eq 0 ]] || fail "merge: exit code $rc"
    grep -q "(5 resumed)" <<<"$out" || fail "the merge redid shards: $out"
    grep -q "shards_fingerprinted_by_tasks=5" <<<"$out" || fail "the merge did not use the tasks' fingerprints: $out"
    n=$(same_output "$tmp/one" "$tmp/array") || exit 1
    echo "ok: 3 array tasks + the merge give the one-task output ($n files equal)" ;;
  megatron_output)
    # [output.megatron]: each kept shard tokenized into a Megatron dataset,
    # the printed --data-path trains.
    make_corpus "$tmp/in" 2
    config "$tmp/in" "$tmp/out" '[output.megatron]' "output_prefix = \"$tmp/tok/corpus\"" \
      '[[stage]]' 'kind = "exact_dedup"'
    mkdir -p "$tmp/tok"
    run --config "$tmp/p.toml"
    [[ $rc -eq 0 ]] || fail "exit code $rc"
    kept=$(grep -oE "documents in -> [0-9]+ out" <<<"$out" | grep -oE "[0-9]+ out" | grep -oE "[0-9]+")
    docs=0
    for k in 0 1; do
      info=$("$claw" inspect-dataset "$tmp/tok/corpus_shard_0000${k}_text_document") || fail "inspect shard $k"
      docs=$((docs + $(grep -oE "^documents: [0-9]+" <<<"$info" | grep -oE "[0-9]+")))
    done
    [[ $docs -eq $kept ]] || fail "the datasets hold $docs documents, curate kept $kept"
    data_path=$(grep -A1 "Megatron datasets" <<<"$out" | tail -1 | sed 's/^ *--data-path//')
    [[ -n $data_path ]] || fail "no --data-path printed"
    # shellcheck disable=SC2086
    "$claw" train --model gpt2-tiny --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 32 \
      --micro-batch-size 2 --global-batch-size 2 --train-iters 2 --eval-interval 0 --data-path $data_path \
      >"$tmp/train.log" 2>&1 || { out=$(cat "$tmp/train.log"); fail "claw train on the --data-path"; }
    # Resumed: nothing tokenized twice, the same datasets.
    before=$(md5sum "$tmp"/tok/*.bin)
    run --config "$tmp/p.toml"
    [[ $before == "$(md5sum "$tmp"/tok/*.bin)" ]] || fail "the datasets changed on the resumed run"
    echo "ok: 2 shards -> 2 Megatron datasets of $docs documents in all (= kept), claw train runs on the --data-path" ;;
  slurm_array)
    # The same split under a real (one-machine) Slurm: sbatch --array, then
    # the merge job.
    . "$(dirname "$0")/../../slurm_box.sh"
    trap 'stop; rm -rf "$tmp"' EXIT
    make_corpus "$tmp/in" 5
    config "$tmp/in" "$tmp/one" "${stages[@]}"
    run --config "$tmp/p.toml"
    [[ $rc -eq 0 ]] || fail "one task: exit code $rc"
    config "$tmp/in" "$tmp/array" "${stages[@]}"
    timeout 300 sbatch --wait --array=0-2 -o "$D/task_%a.out" \
      --wrap "'$claw' curate --config '$tmp/p.toml' --threads 1" >/dev/null || fail "sbatch --array failed"
    for t in 0 1 2; do
      grep -q "task $t of 3: done with its shards and their fingerprints" "$D/task_$t.out" ||
        fail "array task $t: $(cat "$D/task_$t.out")"
    done
    timeout 300 sbatch --wait -o "$D/merge.out" --wrap "'$claw' curate --config '$tmp/p.toml' --threads 2" \
      >/dev/null || fail "the merge job failed: $(cat "$D/merge.out")"
    grep -q "(5 resumed)" "$D/merge.out" || fail "the merge redid shards: $(cat "$D/merge.out")"
    n=$(same_output "$tmp/one" "$tmp/array") || exit 1
    echo "ok: sbatch --array=0-2 + a merge job give the one-task output ($n files equal)" ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
