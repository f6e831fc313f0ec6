#!/usr/bin/env bash
# Build target/gpu-bundle/ and target/gpu-bundle.tar.xz: everything the GPU check needs on a
# machine with no Rust, maybe no MPI and no network (docs/gpu-check.md).
#   bash tools/gpu-bundle.sh        (or: make gpu-bundle)
# Layout of the bundle (run everything from its root):
#   bin/hvtrain                stripped copy of target/release/hvtrain
#   bin/hvtrain-base           with BASE_BIN=path: an earlier build, stripped (the "before" timings)
#   lib/                       every shared library that hvtrain, orterun/orted and the Open MPI
#                              and PMIx plugins load, minus glibc's own (GLIBC_LIBS below)
#   ompi/                      Open MPI relocated: OPAL_PREFIX points here (bin/orterun, bin/orted,
#                              bin/mpirun -> orterun, lib/x86_64-linux-gnu/openmpi/lib/openmpi3/
#                              plugins, share/openmpi/ help texts, etc/openmpi/ Debian's MCA defaults)
#   pmix/                      PMIx's plugins, help texts, params (PMIX_PREFIX and the PMIX_*DIR
#                              variables in env.sh point here: Debian's PMIx has absolute dirs)
#   data/                      Fashion-MNIST IDX .gz files (converted on the GPU machine)
#   jobs/fashion-mnist.toml    the job, paths relative to the bundle root
#   bench/gpu.sh, bench/gpu_scaling.sh, bench/torch_peer.py, tools/compare_runs.py, tools/cublaslt_probe.py,
#   tools/gpu_wire_seeds.sh, run-gpu-check.sh, env.sh
#   hwloc-plugins/             empty on purpose (HWLOC_PLUGINS_PATH: none of the host's)
#   MANIFEST.txt               what is in it: sizes, checksums, source commit, glibc needed
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${BIN:-target/release/hvtrain}
OUT=${OUT:-target/gpu-bundle}
ARCHIVE=${ARCHIVE:-target/gpu-bundle.tar.xz}
FMNIST=${FMNIST:-/usr/share/datasets/fashion-mnist}
MULTIARCH=x86_64-linux-gnu
OMPI_SYS_LIB=/usr/lib/$MULTIARCH/openmpi/lib          # Debian's configured libdir
PMIX_SYS=/usr/lib/$MULTIARCH/pmix2                    # Debian's PMIx prefix
# glibc's own libraries: they must come from the machine that runs the bundle (they are tied to
# its ld.so and kernel interfaces), so they are never copied. Everything else is.
GLIBC_LIBS='^(ld-linux-x86-64\.so\.2|linux-vdso\.so\.1|libc\.so\.6|libm\.so\.6|libmvec\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1|libresolv\.so\.2|libutil\.so\.1|libanl\.so\.1|libnsl\.so\.1|libnss_[a-z]+\.so\.2|libBrokenLocale\.so\.1|libthread_db\.so\.1|libc_malloc_debug\.so\.0)$'

die() { echo "gpu-bundle: $*" >&2; exit 1; }
[ -x "$BIN" ] || die "$BIN is missing: run cargo build --release (make build)"
[ -d "$OMPI_SYS_LIB/openmpi3" ] || die "Open MPI's plugins are not in $OMPI_SYS_LIB/openmpi3 (make deps)"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  [ -f "$FMNIST/$f" ] || die "$FMNIST/$f is missing (Debian package dataset-fashion-mnist: make deps)"
done

rm -rf "$OUT" "$ARCHIVE"
mkdir -p "$OUT"/{bin,lib,data,jobs,bench,tools,hwloc-plugins,hdf5-plugins}

# --- The binary.
strip -o "$OUT/bin/hvtrain" "$BIN"
# An earlier build to time beside this one on the same GPU (bench/gpu.sh's "before" column).
if [ -n "${BASE_BIN:-}" ]; then strip -o "$OUT/bin/hvtrain-base" "$BASE_BIN"; fi

# --- Open MPI, relocated (OPAL_PREFIX=$OUT/ompi mirrors the configured prefix /usr).
P="$OUT/ompi"
mkdir -p "$P/bin" "$P/lib/$MULTIARCH/openmpi/lib" "$P/share" "$P/etc"
cp -L /usr/bin/orterun /usr/bin/orted "$P/bin/"
ln -s orterun "$P/bin/mpirun"
ln -s orterun "$P/bin/mpiexec"
# The plugins (real files). The rest of that folder is development symlinks (libmpi.so ->
# ../../libmpi.so.40 ...), pkgconfig/ and the PMPI monitoring library: the runtime needs none
# of them (it loads the sonames, which are in lib/).
cp -a "$OMPI_SYS_LIB/openmpi3" "$P/lib/$MULTIARCH/openmpi/lib/"
# Left out unless FULL_OMPI=1, to keep the archive under 40 MiB: the plugins for fabrics a
# one-node check cannot use (UCX, libfabric/OFI, InfiniBand verbs, PSM/PSM2: Debian's own
# openmpi-mca-params.conf already disables UCX, OFI and openib) and OpenSHMEM's (hvtrain is
# MPI only). They bring libfabric, UCX, verbs, PSM and liboshmem: 7.5 MB, 2.5 MB compressed.
# Shared memory (vader), TCP, self, and every launch, PMIx and collective plugin stay.
DROPPED=""
if [ "${FULL_OMPI:-0}" != 1 ]; then
  for f in "$P/lib/$MULTIARCH/openmpi/lib/openmpi3"/mca_{atomic,memheap,scoll,spml,sshmem}_*.so \
           "$P/lib/$MULTIARCH/openmpi/lib/openmpi3"/mca_*_{ucx,ofi}.so \
           "$P/lib/$MULTIARCH/openmpi/lib/openmpi3"/mca_{btl_openib,mtl_psm,mtl_psm2}.so; do
    [ -e "$f" ] && { DROPPED+=" $(basename "$f" .so)"; rm -f "$f"; }
  done
fi
cp -a /usr/share/openmpi "$P/share/"
[ -d /etc/openmpi ] && cp -a /etc/openmpi "$P/etc/"

# --- PMIx's plugins (Open MPI 4.1 on Debian uses the external libpmix.so.2).
if [ -d "$PMIX_SYS/lib/pmix" ]; then
  mkdir -p "$OUT/pmix/lib" "$OUT/pmix/share"
  cp -a "$PMIX_SYS/lib/pmix" "$OUT/pmix/lib/"
  cp -a "$PMIX_SYS/share/." "$OUT/pmix/share/"
  # Its params file names the plugin folder by absolute path: env.sh sets it instead.
  [ -f "$OUT/pmix/share/pmix-mca-params.conf" ] && sed -i 's|^mca_base_component_path *=|# (gpu-bundle: set by env.sh) &|' "$OUT/pmix/share/pmix-mca-params.conf"
fi

# --- HDF5's compression filter plugins (Debian's: Blosc, LZ4, BZip2, ZFP; LZF is built into
# hvtrain), so compressed training files read on the GPU machine too (env.sh points
# HDF5_PLUGIN_PATH here).
HDF5_PLUGINS=/usr/lib/$MULTIARCH/hdf5/serial/plugins
[ -d "$HDF5_PLUGINS" ] && cp -L "$HDF5_PLUGINS"/*.so "$OUT/hdf5-plugins/" 2>/dev/null || true
rm -f "$OUT/hdf5-plugins/liblzf_filter.so" # Debian's misses its liblzf dependency; hvtrain has LZF built in

# --- Shared libraries: ldd of every ELF file we ship (ldd gives the whole closure).
elves() { find "$OUT/bin" "$P/bin" "$P/lib" "$OUT/pmix" "$OUT/hdf5-plugins" -type f 2>/dev/null | while read -r f; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "177ELF" ] && echo "$f"; done; }
missing=0
for f in $(elves); do
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then echo "gpu-bundle: $f needs $name: not found on this machine" >&2; missing=1; continue; fi
    [[ "$name" =~ $GLIBC_LIBS ]] && continue
    [ -e "$OUT/lib/$name" ] || cp -L "$path" "$OUT/lib/$name"
  done < <(ldd "$f")
done
[ "$missing" = 0 ] || die "unresolved libraries (above)"
chmod 644 "$OUT"/lib/*
strip --strip-unneeded "$OUT"/lib/* 2>/dev/null || true

# --- Data, job, scripts.
cp "$FMNIST"/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz "$OUT/data/"
sed -e 's|^# Paths are relative to the directory the job is started from.|# GPU bundle copy: paths are relative to the bundle root (run-gpu-check.sh runs from there;\n# it converts data/*.gz to the .h5 files named here).|' \
  jobs/fashion-mnist.toml > "$OUT/jobs/fashion-mnist.toml"
grep -q '^train = "data/fashion-mnist-train.h5"' "$OUT/jobs/fashion-mnist.toml" || die "jobs/fashion-mnist.toml changed its data paths; adapt tools/gpu-bundle.sh"
cp bench/torch_peer.py bench/gpu.sh bench/gpu_profile.sh bench/gpu_scaling.sh "$OUT/bench/"
cp tools/compare_runs.py "$OUT/tools/"
# Diagnostics of the 2026-11-29 H200 run, for rerunning there: which cublasLt bf16-output calls
# cuBLAS accepts (python3 + torch), and the bf16 wire's accuracy against its seed noise.
cp tools/cublaslt_probe.py tools/gpu_wire_seeds.sh "$OUT/tools/"
cp tools/run-gpu-check.sh "$OUT/run-gpu-check.sh"
cat > "$OUT/env.sh" <<'EOF'
# Source this (bash) to use the bundle's hvtrain and Open MPI by hand:  . ./env.sh
# Only hvtrain and mpirun need LD_LIBRARY_PATH; do not run python3/torch with it set
# (the bundled libz/libssl/libffi are older than the system's), use `env -u LD_LIBRARY_PATH`.
B=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export OPAL_PREFIX="$B/ompi"
# Debian's PMIx has absolute libdir/pkglibdir/datadir compiled in, which its prefix does not
# move: each is set (PMIx's "env" install-dirs component reads these names).
export PMIX_PREFIX="$B/pmix" PMIX_EXEC_PREFIX="$B/pmix" PMIX_LIBDIR="$B/pmix/lib" PMIX_PKGLIBDIR="$B/pmix/lib/pmix"
export PMIX_DATAROOTDIR="$B/pmix/share" PMIX_DATADIR="$B/pmix/share" PMIX_PKGDATADIR="$B/pmix/share/pmix" PMIX_SYSCONFDIR="$B/pmix/share"
export PMIX_MCA_mca_base_component_path="$B/pmix/lib/pmix"
# hwloc would load the host's hwloc plugins (another hwloc version's, or OpenCL/NVML/GL ones
# that start GPU runtimes inside mpirun): point it at an empty folder; its built-ins suffice.
export HWLOC_PLUGINS_PATH="$B/hwloc-plugins"
# HDF5's compression filters (Blosc, LZ4, BZip2, ZFP) for compressed training files.
export HDF5_PLUGIN_PATH="$B/hdf5-plugins"
export PATH="$B/ompi/bin:$B/bin:$PATH"
export LD_LIBRARY_PATH="$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Debian's /etc/openmpi/openmpi-mca-params.conf is not relocated by OPAL_PREFIX (sysconfdir is
# absolute), so its settings are repeated here: no UCX/OFI/openib/psm, quiet about unused BTLs.
export OMPI_MCA_btl='^uct,openib,ofi' OMPI_MCA_mtl='^ofi,psm,psm2' OMPI_MCA_pml='^ucx' OMPI_MCA_osc='^ucx,pt2pt'
export OMPI_MCA_btl_base_warn_component_unused=0
EOF

# --- Manifest.
{
  echo "hvtrain GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "source: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "hvtrain sha256: $(sha256sum "$OUT/bin/hvtrain" | cut -d' ' -f1) (stripped); built from $BIN sha256: $(sha256sum "$BIN" | cut -d' ' -f1)"
  echo "Open MPI: $(/usr/bin/orterun --version 2>/dev/null | head -1)"
  echo "built against $(ldd --version | head -1)"
  need=$(for f in $(elves) "$OUT"/lib/*; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  echo "needs glibc >= ${need#GLIBC_} on the machine that runs it (newest GLIBC_ symbol version referenced)"
  echo "Open MPI plugins left out (FULL_OMPI=1 keeps them):${DROPPED:- none}"
  echo "glibc libraries not bundled (from the host): libc libm libmvec libpthread libdl librt libresolv libutil libanl libnsl libnss_* ld-linux"
  echo
  echo "sizes (du -sh):"
  (cd "$OUT" && du -sh bin lib ompi pmix data jobs bench tools 2>/dev/null)
  echo
  echo "libraries ($(ls "$OUT/lib" | wc -l)):"
  (cd "$OUT/lib" && ls -S | while read -r l; do printf '  %8s  %s\n' "$(du -k "$l" | cut -f1)K" "$l"; done)
} > "$OUT/MANIFEST.txt"

# --- Archive: xz (every tar has -J). One top folder, gpu-bundle/.
XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$(dirname "$OUT")" -cJf "$ARCHIVE" "$(basename "$OUT")"
echo "gpu-bundle: $OUT ($(du -sh "$OUT" | cut -f1)), $ARCHIVE ($(du -h "$ARCHIVE" | cut -f1), $(stat -c %s "$ARCHIVE") bytes)"
sed -n '1,/^libraries/p' "$OUT/MANIFEST.txt"
