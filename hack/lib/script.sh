# shellcheck shell=bash
# Sourced first by hack's scripts: ROOT (the repository) is set and is the working directory, and
# usage_if_asked prints a script's --help.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# usage_if_asked SCRIPT [ARGS...]: with -h or --help first in ARGS, prints SCRIPT's header comment
# (its lines after the shebang up to the first line of code) and exits.
usage_if_asked() {
  local script=$1
  shift
  if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$script"
    exit 0
  fi
}
