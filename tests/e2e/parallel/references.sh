#!/usr/bin/env bash
# The fixture mpi_references: empties $CLAW_TEST_REFS, then computes there
# the single-rank runs and data that several of the train_*.sh scripts
# compare against (models.sh, compare_runs.sh: reference), two at a time.
# The scripts compute any other reference themselves, once, on first use.
#
#   references.sh CLAW_BINARY
. "$(dirname "$0")/../../lib.sh"
claw=$1
: "${CLAW_TEST_REFS:?set by tests/e2e/parallel/CMakeLists.txt}"
rm -rf "$CLAW_TEST_REFS" && mkdir -p "$CLAW_TEST_REFS" || fail "cannot make $CLAW_TEST_REFS"
# shellcheck source=models.sh
source "$here/models.sh"
# shellcheck source=compare_runs.sh
source "$here/compare_runs.sh"
common=("${mpi_common[@]}")
start=$(date +%s)
reference gpt "${common[@]}" "${gpt[@]}" & a=$!
reference llama "${common[@]}" "${llama[@]}" & b=$!
wait $a && wait $b || fail "gpt / llama"
reference gpt_nodrop "${common[@]}" "${gpt_nodrop[@]}" & a=$!
reference gpt_l4 "${common[@]}" "${gpt[@]}" --num-layers 4 & b=$!
wait $a && wait $b || fail "gpt without dropout / gpt with 4 layers"
reference mixtral "${common[@]}" "${mixtral[@]}" & a=$!
reference deepseek "${common[@]}" "${deepseek[@]}" & b=$!
wait $a && wait $b || fail "mixtral / deepseek"
task_data sft >/dev/null & a=$!
task_data dpo >/dev/null & b=$!
wait $a && wait $b || fail "SFT / DPO data"
echo "references in $CLAW_TEST_REFS ($(($(date +%s) - start)) s): $(ls "$CLAW_TEST_REFS" | grep -c 'jsonl$') runs, SFT and DPO data"
