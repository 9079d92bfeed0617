# Sourced by tools/train-family.sh and tools/train-variable-rate.sh: the
# arguments "BSDS500_TRAIN_DIR SECONDS" both take, and the plexus-ae both run.
# training_arguments "$0" "$@" sets data, seconds, root (the repository) and
# plexus_ae ($PLEXUS_AE, or build/bin/plexus-ae), or exits 2 saying which
# argument is wrong.
training_arguments() {
  local script=$1
  shift
  if [ $# -ne 2 ]; then
    echo "usage: $script BSDS500_TRAIN_DIR SECONDS" >&2
    exit 2
  fi
  data=$1
  seconds=$2
  [ -d "$data" ] || { echo "$script: training folder '$data' does not exist" >&2; exit 2; }
  case $seconds in '' | *[!0-9.]*) echo "$script: SECONDS must be a number, got '$seconds'" >&2; exit 2 ;; esac
  root=$(cd "$(dirname "$script")/.." && pwd)
  plexus_ae=${PLEXUS_AE:-$root/build/bin/plexus-ae}
  [ -x "$plexus_ae" ] || { echo "$script: '$plexus_ae' is not built (cmake --build build --target plexus-ae)" >&2; exit 2; }
}
