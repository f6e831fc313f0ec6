# Shared set-up of the bench scripts (sourced): repository root, the binary built, the
# Fashion-MNIST HDF5 files made, Open MPI allowed to run as root, a scratch dir removed on exit
# (kept, and named, with KEEP_WORK=1: to rerun a report from the raw files).
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=${HVTRAIN_BIN:-target/release/hvtrain}  # HVTRAIN_BIN: a copy, to rebuild while a bench runs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || cargo build --release
[ -f data/fashion-mnist-train.h5 ] || make data
work=$(mktemp -d)
if [ -n "${KEEP_WORK:-}" ]; then echo "scratch: $work (kept)" >&2; else trap 'rm -rf "$work"' EXIT; fi
# raw_lines OUT PATTERN LOG...: each log's lines matching the extended regex PATTERN (cut to 400
# characters) under a "== NAME" heading, into OUT: a record's raw lines beside its report.
raw_lines() {
  local out=$1 pat=$2 f; shift 2
  for f in "$@"; do
    echo "== $(basename "$f" .log)"
    grep -E "$pat" "$f" | cut -c1-400 || true
  done > "$out"
}
# measure NAME CMD...: CMD's wall seconds and peak RSS (GNU time, "seconds max_rss_kib") appended
# to $work/NAME, its output in $work/NAME.log; a failure prints that log and ends the script.
measure() {
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$work/t" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log" >&2; exit 1; }
  cat "$work/t" >> "$work/$name"
}
