# Shared set-up of the bench scripts (sourced): repository root, the binary built, the
# Fashion-MNIST HDF5 files made, Open MPI allowed to run as root, a scratch dir removed on exit.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN=target/release/hvtrain
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -x "$BIN" ] || cargo build --release
[ -f data/fashion-mnist-train.h5 ] || make data
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
