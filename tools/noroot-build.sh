#!/usr/bin/env bash
# The build a cluster user without root does (docs/clusters.md, "On a cluster without root"), proven on
# this machine: MPI and HDF5 unpacked into a private prefix, the system's MPI and HDF5 out of
# sight, and, as an unprivileged user:
#   MPICC=PREFIX/mpich/bin/mpicc HDF5_DIR=PREFIX/hdf5/... cargo build --release
# then `hvtrain data import-idx` and a 2-rank training job under the prefix's own mpiexec, with no
# LD_LIBRARY_PATH: the binary finds libmpi and libhdf5 through the rpath build.rs gives it.
#
#   bash tools/noroot-build.sh [WORK]      (WORK: target/noroot; tests/noroot.rs runs it)
#
# The prefix: MPICH from its PyPI wheel (`pip download mpich`, pinned and checksummed: a
# relocatable MPICH with bin/mpicc, include/, lib/, as a `module load mpich` gives) and HDF5
# from Debian's packages unpacked with `dpkg -x` (libhdf5-103-1, libhdf5-dev: include/, lib/).
# "Out of sight": a private mount namespace (unshare -m) binds an empty folder over every
# folder and /dev/null over every other file of Debian's Open MPI, MPICH and HDF5 packages
# (/usr/bin/mpicc, libmpi.so.40, libhdf5_serial.so.103, hdf5.pc, ...), so a build or a run that
# reached for one would fail. Root is needed for that namespace and the user only; the build
# and the job run as user `hvbuild` (created here), with its own CARGO_HOME and the machine's
# Rust toolchain bound read-only at /opt/hvbuild-rustup (root's home is not readable by others).
# Exit 77 (skipped) when not root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(realpath -m "${1:-target/noroot}")
USER_NAME=hvbuild
MPICH_VERSION=5.0.2
MPICH_WHEEL=mpich-$MPICH_VERSION-py3-none-manylinux_2_28_x86_64.whl
MPICH_SHA256=8fed465ebff269ea2ebac179a25de02671ddf8df476e0f115be089015015cfd4
HDF5_DEBS="libhdf5-103-1 libhdf5-dev"
# Debian's MPI and HDF5: what the namespace hides.
HIDE_PKGS="libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libmpich-dev libmpich12 mpich \
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libhdf5-cpp-103-1 libhdf5-hl-cpp-100 libhdf5-fortran-102 libhdf5-hl-fortran-100"
HIDE_DIRS="/usr/lib/x86_64-linux-gnu/openmpi /usr/share/openmpi /etc/openmpi /usr/lib/x86_64-linux-gnu/mpich \
  /usr/include/x86_64-linux-gnu/mpich /usr/include/hdf5 /usr/lib/x86_64-linux-gnu/hdf5"

say() { echo "noroot-build: $*"; }
die() { echo "noroot-build: FAILED: $*" >&2; exit 1; }
if [ "$(id -u)" != 0 ]; then
  say "skipped: needs root for the mount namespace that hides the system's MPI and HDF5 (run as root, or by CI)"
  exit 77
fi
for c in unshare runuser useradd dpkg apt-get python3 cargo; do command -v "$c" >/dev/null || die "$c is missing"; done

# --- The private prefix (as root: downloads; then handed to the user).
rm -rf "$WORK"
mkdir -p "$WORK"/{dl,prefix/mpich,prefix/hdf5,home,src}
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  --python-version 3 --implementation py --abi none --dest "$WORK/dl" "mpich==$MPICH_VERSION"
echo "$MPICH_SHA256  $WORK/dl/$MPICH_WHEEL" | sha256sum --check --quiet || die "the MPICH wheel's checksum differs"
python3 -m zipfile -e "$WORK/dl/$MPICH_WHEEL" "$WORK/dl/wheel"
cp -a "$WORK/dl/wheel/mpich-$MPICH_VERSION.data/data/." "$WORK/prefix/mpich/"
chmod +x "$WORK/prefix/mpich/bin/"*
(cd "$WORK/dl" && { apt-get download $HDF5_DEBS >/dev/null 2>&1 || { apt-get update -qq && apt-get download $HDF5_DEBS >/dev/null; }; }) \
  || die "apt-get download $HDF5_DEBS"
for d in "$WORK"/dl/*.deb; do dpkg -x "$d" "$WORK/prefix/hdf5"; done
# Debian's layout keeps include/ and lib/ side by side here (relative links): HDF5_DIR.
HDF5_DIR=$WORK/prefix/hdf5/usr/lib/x86_64-linux-gnu/hdf5/serial
[ -e "$HDF5_DIR/include/H5pubconf.h" ] && [ -e "$HDF5_DIR/lib/libhdf5.so" ] || die "no HDF5 in $HDF5_DIR"
say "prefix: MPICH $MPICH_VERSION (PyPI wheel) in $WORK/prefix/mpich, HDF5 $(dpkg-deb -f "$WORK"/dl/libhdf5-103-1_*.deb Version) (dpkg -x) in $WORK/prefix/hdf5"

# The sources as a user's checkout (tracked and new files, not target/).
git ls-files -co --exclude-standard -z | tar --null -T - -cf - | tar -xf - -C "$WORK/src"
id "$USER_NAME" >/dev/null 2>&1 || useradd --no-create-home --home-dir "$WORK/home" --shell /bin/bash "$USER_NAME"
# A CARGO_HOME of the user's own, seeded with this machine's registry (crates.io is reachable
# too; the copy only saves the download).
mkdir -p "$WORK/home/.cargo"
[ -d "${CARGO_HOME:-$HOME/.cargo}/registry" ] && cp -a "${CARGO_HOME:-$HOME/.cargo}/registry" "$WORK/home/.cargo/"
chown -R "$USER_NAME:" "$WORK"
# Every folder above WORK must be passable for the user.
p=$WORK
while [ "$p" != / ]; do p=$(dirname "$p"); chmod o+x "$p" 2>/dev/null || true; done
RUSTUP=${RUSTUP_HOME:-$HOME/.rustup}
CARGO_BIN=$(dirname "$(command -v cargo)")

# --- In a private mount namespace: hide, then build and run as the user. (This script reaches
# the inner shell on its standard input: every command there reads /dev/null instead, or
# mpiexec would swallow the rest of it.)
export WORK HDF5_DIR USER_NAME HIDE_PKGS HIDE_DIRS RUSTUP CARGO_BIN
unshare --mount --propagation private bash -euo pipefail <<'NS'
say() { echo "noroot-build: $*"; }
die() { echo "noroot-build: FAILED: $*" >&2; exit 1; }
hidden=0
before=$(wc -l < /proc/self/mountinfo)
for d in $HIDE_DIRS; do [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=755 none "$d" && hidden=$((hidden + 1)); done
for pkg in $HIDE_PKGS; do
  dpkg -L "$pkg" 2>/dev/null | while read -r f; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    for d in $HIDE_DIRS; do case $f in "$d"/*) continue 2 ;; esac; done
    mount --bind /dev/null "$f"
  done
done
say "hid the system's MPI and HDF5: $hidden folders, $(( $(wc -l < /proc/self/mountinfo) - before )) mounts in all"
# What a build would have found of them now.
for f in /usr/bin/mpicc /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libhdf5_serial.so.103 \
         /usr/lib/x86_64-linux-gnu/libmpich.so.12 /usr/lib/x86_64-linux-gnu/pkgconfig/hdf5.pc; do
  [ ! -s "$f" ] || die "$f is still visible"
done
mkdir -p /opt/hvbuild-rustup /opt/hvbuild-cargo-bin
mount --bind "$RUSTUP" /opt/hvbuild-rustup && mount -o remount,bind,ro /opt/hvbuild-rustup
mount --bind "$CARGO_BIN" /opt/hvbuild-cargo-bin && mount -o remount,bind,ro /opt/hvbuild-cargo-bin
P=$WORK/prefix
as_user() {
  runuser -u "$USER_NAME" -- env -i HOME="$WORK/home" USER="$USER_NAME" \
    PATH="$P/mpich/bin:/opt/hvbuild-cargo-bin:/usr/local/bin:/usr/bin:/bin" \
    RUSTUP_HOME=/opt/hvbuild-rustup CARGO_HOME="$WORK/home/.cargo" CARGO_NET_OFFLINE="${CARGO_NET_OFFLINE:-false}" \
    MPICC="$P/mpich/bin/mpicc" HDF5_DIR="$HDF5_DIR" "$@" < /dev/null
}
say "building as $(as_user id -un) (uid $(as_user id -u)): MPICC=$P/mpich/bin/mpicc HDF5_DIR=$HDF5_DIR cargo build --release"
t0=$(date +%s)
# The release profile lightened (opt-level 1, no LTO, 16 codegen units, no debug info) to save
# CI minutes (3.6 instead of 6.3 on 2 cores): what this proves, the build script finding
# MPI and HDF5 in the prefix and the run path it writes, is the same in every profile.
FAST="CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=off CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=false"
(cd "$WORK/src" && as_user env $FAST cargo build --release --bin hvtrain 2>&1) > "$WORK/build.log" || { tail -40 "$WORK/build.log"; die "cargo build (log: $WORK/build.log)"; }
say "built in $(( $(date +%s) - t0 )) s"
BIN=$WORK/src/target/release/hvtrain
say "RUNPATH: $(readelf -d "$BIN" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p;s/.*(RPATH).*\[\(.*\)\]/\1/p')"
# As the user runs it: no LD_LIBRARY_PATH, the system's copies hidden.
# ldd's output read once, then searched (grep -q on a pipe under pipefail fails by chance:
# it exits at the first match and ldd, still writing, dies of SIGPIPE).
LDD=$(as_user ldd "$BIN") || die "ldd $BIN failed"
grep -E 'libmpi|libhdf5' <<<"$LDD" | sed 's/^\s*/noroot-build: ldd: /'
grep -q "libmpi.so.12 => $P/mpich/lib/" <<<"$LDD" || die "libmpi does not resolve into the prefix"
grep -q "libhdf5_serial.so.103 => $P/hdf5/" <<<"$LDD" || die "libhdf5 does not resolve into the prefix"
! grep -q "not found" <<<"$LDD" || die "a library is not found"
cd "$WORK/src"
F=/usr/share/datasets/fashion-mnist
as_user "$BIN" data import-idx $F/train-images-idx3-ubyte.gz $F/train-labels-idx1-ubyte.gz data/fashion-mnist-train.h5 2>&1 | tail -1
as_user "$BIN" data import-idx $F/t10k-images-idx3-ubyte.gz $F/t10k-labels-idx1-ubyte.gz data/fashion-mnist-test.h5 2>&1 | tail -1
as_user timeout 300 "$P/mpich/bin/mpiexec" -n 2 "$BIN" train jobs/fashion-mnist.toml --set training.epochs=1 \
  --set 'output.dir="runs/noroot"' > "$WORK/train.log" 2>&1 || { tail -30 "$WORK/train.log"; die "the 2-rank job"; }
grep -E "rank 0/2 on|done:" "$WORK/train.log" | sed 's/^/noroot-build: job: /'
grep -q "done: test accuracy" "$WORK/train.log" || die "the job did not finish (log: $WORK/train.log)"
say "ok: built without root against a private MPI and HDF5, and trained 2 ranks"
NS
