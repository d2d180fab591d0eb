# The preamble of the suite's shell tests (tests/e2e/*/*.sh), sourced first:
#
#   . "$(dirname "$0")/../../lib.sh"
#
# It sets strict mode for unset variables and pipelines (set -u -o pipefail;
# a script that wants -e adds it), and defines:
#   here     the script's own directory
#   tmp      a fresh directory, removed when the script exits (KEEP=1 keeps it)
#   mpirun   Open MPI's launcher as the tests run it: oversubscribed, unbound
#            (a 2-core machine runs 8 ranks); as root, allowed
#   fail MESSAGE...   prints "FAIL: MESSAGE" and exits 1
# A script with more to clean up sets its own EXIT trap and removes $tmp in it.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)
tmp=$(mktemp -d)
claw_test_cleanup() { [[ -n ${KEEP:-} ]] || rm -rf "$tmp"; }
trap claw_test_cleanup EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun=(mpirun --oversubscribe --bind-to none)
fail() { echo "FAIL: $*"; exit 1; }
