#!/usr/bin/env bash
# `claw preprocess` through the CLI: a run's outputs and report, progress on
# stderr, the built-in corpus being exactly `claw preprocess` output, and bad
# input giving a one-line error naming the file/line/flag while leaving no
# file under the output name.
#   preprocess.sh CLAW_BINARY CASE
. "$(dirname "$0")/../../lib.sh"
claw=$1
case_name=$2
data=${CLAW_DATA_DIR:?CLAW_DATA_DIR must name the built-in data directory}
mkdir "$tmp/out"
gpt2=(--vocab-file "$data/gpt2/encoder.json" --merge-file "$data/gpt2/vocab.bpe")

run() {  # run ARGS... ; sets out (stdout + stderr), rc
  out=$("$claw" preprocess "${gpt2[@]}" "$@" 2>&1)
  rc=$?
}
fail() { echo "FAIL: $*"; printf '%s\n' "$out" | tail -5; exit 1; }
expect_error() {  # expect_error PATTERN: failed with a one-line claw error matching PATTERN, nothing written
  local last
  last=$(printf '%s\n' "$out" | tail -n 1)
  [[ $rc -ne 0 ]] || fail "exit code 0"
  [[ $last == "claw: error: "* ]] || fail "last line is not a claw error: $last"
  grep -qE -- "$1" <<<"$last" || fail "error does not match /$1/: $last"
  [[ -z $(ls -A "$tmp/out") ]] || fail "files left in the output directory: $(ls "$tmp/out")"
  echo "ok: $last"
}
jsonl() {  # jsonl NAME LINES...: writes one line per argument
  local f="$tmp/$1"
  shift
  printf '%s\n' "$@" >"$f"
  echo "$f"
}

case $case_name in
  outputs_and_report)
    in=$(jsonl in.jsonl '{"text": "Hello world, this is a test.", "title": "a"}' '' \
                        '{"text": ["Two ", "sentences."], "title": "b"}')
    run --input "$in" --output-prefix "$tmp/out/x" --json-keys text title --append-eod --workers 2 --log-interval 1
    [[ $rc -eq 0 ]] || fail "exit code $rc"
    grep -qE "3 lines -> 2 documents \(0 bad lines skipped, 1 blank\)" <<<"$out" || fail "summary"
    grep -qE "[0-9.]+ MB/s, [0-9]+ docs/s, [0-9]+ tokens/s" <<<"$out" || fail "summary rates"
    grep -qE "preprocess: 100.0% 2 documents, [0-9]+ docs/s, [0-9.]+ MB/s, [0-9]+ tokens/s, ETA 0:00" <<<"$out" ||
      fail "progress line"
    grep -q "wrote $tmp/out/x_title_document.bin and .idx (uint16)" <<<"$out" || fail "title output"
    info=$("$claw" inspect-dataset "$tmp/out/x_text_document" --documents -1)
    grep -q "^documents: 2$" <<<"$info" || fail "documents: $info"
    grep -q "^document 0: 1 sequences, 9 tokens: 15496 995 11 428 318 257 1332 13 50256$" <<<"$info" ||
      fail "first document: $info"
    grep -q "^document 1: 2 sequences, .* | .* 50256$" <<<"$info" || fail "second document: $info"
    echo "ok: outputs, summary, progress and inspect-dataset" ;;
  terminal_progress)
    in=$(jsonl in.jsonl '{"text": "a"}' '{"text": "b"}')
    out=$(script -qec "'$claw' preprocess ${gpt2[*]} --input '$in' --output-prefix '$tmp/out/t'" /dev/null)
    grep -qE $'\r\\[#+\\] 100.0%  2 documents, [0-9]+ docs/s, [0-9.]+ MB/s, [0-9]+ tokens/s, ETA 0:00' <<<"$out" ||
      fail "no progress bar on a terminal"
    echo "ok: progress bar on a terminal" ;;
  builtin_corpus_is_preprocess_output)
    mkdir "$tmp/data"
    ln -s "$data/sotu" "$tmp/data/sotu"
    ln -s "$data/gpt2" "$tmp/data/gpt2"
    "$claw" train --data-dir "$tmp/data" --train-iters 0 --num-threads 2 >/dev/null 2>&1 || fail "claw train"
    run --input "$tmp/data/sotu.jsonl" --output-prefix "$tmp/out/sotu" --append-eod --workers 1
    [[ $rc -eq 0 ]] || fail "exit code $rc"
    for ext in bin idx; do
      cmp -s "$tmp/out/sotu_text_document.$ext" "$tmp/data/sotu_gpt2_text_document.$ext" ||
        fail "the built-in corpus .$ext differs from claw preprocess output"
    done
    echo "ok: the built-in corpus is byte for byte \`claw preprocess --append-eod\` of $tmp/data/sotu.jsonl" ;;
  malformed_json)
    in=$(jsonl in.jsonl '{"text": "fine"}' '{"text": "fine"}' '{"text": nope, "id": 3}')
    run --input "$in" --output-prefix "$tmp/out/x"
    expect_error "$in:3: malformed JSON at byte 10: .*invalid literal.*\(pass --skip-bad-lines to drop bad lines\)" ;;
  missing_key)
    in=$(jsonl in.jsonl '{"text": "fine"}' '{"body": "no text here"}')
    run --input "$in" --output-prefix "$tmp/out/x"
    expect_error "$in:2: no key \"text\" \(--json-keys\); the record's keys are \"body\"" ;;
  invalid_utf8)
    in="$tmp/in.jsonl"
    printf '{"text": "fine"}\n{"text": "caf\xe9"}\n' >"$in"
    run --input "$in" --output-prefix "$tmp/out/x"
    expect_error "$in:2: invalid UTF-8 at byte 13 of the line \(0xe9\)" ;;
  skip_bad_lines)
    in="$tmp/in.jsonl"
    printf '{"text": "a"}\nnot json\n{"text": "caf\xe9"}\n{"text": "b"}\n{"x": 1}\n' >"$in"
    run --input "$in" --output-prefix "$tmp/out/x" --skip-bad-lines
    [[ $rc -eq 0 ]] || fail "exit code $rc"
    grep -q "5 lines -> 2 documents (3 bad lines skipped, 0 blank)" <<<"$out" || fail "summary counts"
    grep -q "warning: $in:2: skipped: malformed JSON" <<<"$out" || fail "warning for line 2"
    grep -q "warning: $in:3: skipped: invalid UTF-8" <<<"$out" || fail "warning for line 3"
    echo "ok: 3 bad lines skipped and counted" ;;
  empty_input)
    : >"$tmp/empty.jsonl"
    run --input "$tmp/empty.jsonl" --output-prefix "$tmp/out/x"
    expect_error "--input $tmp/empty.jsonl: the file is empty" ;;
  missing_input)
    run --input "$tmp/nothing.jsonl" --output-prefix "$tmp/out/x"
    expect_error "--input $tmp/nothing.jsonl not found" ;;
  missing_output_dir)
    in=$(jsonl in.jsonl '{"text": "a"}')
    run --input "$in" --output-prefix "$tmp/out/no/such/dir/x"
    expect_error "--output-prefix $tmp/out/no/such/dir/x: directory $tmp/out/no/such/dir does not exist" ;;
  unwritable_output_dir)
    in=$(jsonl in.jsonl '{"text": "a"}')
    # Permissions do not stop root; a file where the directory should be
    # stops everyone.
    touch "$tmp/not_a_dir"
    run --input "$in" --output-prefix "$tmp/not_a_dir/x"
    expect_error "--output-prefix $tmp/not_a_dir/x: $tmp/not_a_dir is not a directory"
    if [[ $(id -u) -ne 0 ]]; then
      chmod 555 "$tmp/out"
      run --input "$in" --output-prefix "$tmp/out/x"
      chmod 755 "$tmp/out"
      expect_error "--output-prefix $tmp/out/x: cannot write to directory $tmp/out \\(Permission denied\\)"
    fi ;;
  dtype_too_small)
    in=$(jsonl in.jsonl '{"text": "a"}')
    run --input "$in" --output-prefix "$tmp/out/x" --dtype uint8
    expect_error "--dtype uint8 holds ids up to 255, but the gpt2-bpe vocabulary has 50257 ids .*use --dtype uint16" ;;
  split_sentences)
    in=$(jsonl in.jsonl '{"text": "a"}')
    run --input "$in" --output-prefix "$tmp/out/x" --split-sentences
    expect_error "--split-sentences is not supported: .*JSON list of sentences" ;;
  failed_run_leaves_no_file)
    # A bad line near the end of a multi-chunk input: the good lines before
    # it were tokenized and written to temporaries, which must all go.
    /usr/bin/python3 -c "
import json
with open('$tmp/big.jsonl', 'w') as f:
    for i in range(20000): f.write(json.dumps({'text': f'document {i}: ' + 'some words ' * 40}) + '\n')
    f.write('{\"text\": 1}\n')"
    run --input "$tmp/big.jsonl" --output-prefix "$tmp/out/x" --workers 2
    expect_error "$tmp/big.jsonl:20001: key \"text\" holds a number" ;;
  interrupted_run_leaves_no_file)
    /usr/bin/python3 -c "
import json
with open('$tmp/big.jsonl', 'w') as f:
    for i in range(150000): f.write(json.dumps({'text': f'document {i}: ' + 'some words ' * 40}) + '\n')"
    "$claw" preprocess "${gpt2[@]}" --input "$tmp/big.jsonl" --output-prefix "$tmp/out/x" --workers 1 \
      --log-interval 1 >"$tmp/stdout" 2>"$tmp/stderr" &
    pid=$!
    # Interrupt once the first chunk is written, well before the end.
    for _ in $(seq 1000); do grep -q "preprocess: " "$tmp/stderr" && break; sleep 0.01; done
    kill -INT $pid
    wait $pid
    rc=$?
    out=$(cat "$tmp/stdout" "$tmp/stderr")
    grep -q "^wrote" "$tmp/stdout" && fail "the run finished before the signal; make the input larger"
    expect_error "interrupted by signal 2 \(SIGINT\); nothing was written under the output names" ;;
  *) echo "unknown case $case_name"; exit 2 ;;
esac
