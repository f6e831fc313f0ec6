# hvtrain: the two commands a newcomer needs.
#   make demo   installs what is needed, builds, converts Fashion-MNIST to HDF5 and trains
#               784-512-512-10 on 2 ranks with mpirun (CPU), then plots the curves.
#   make test   installs what is needed and runs every test, multi-rank ones under mpirun.
#   make docs   builds the user documentation (docs/, an mdBook) into target/book/index.html.
# Other targets: deps, build, data, bench, lint, nvrtc, onnx-venv, clean.

APT_PKGS := libopenmpi-dev openmpi-bin libhdf5-dev libclang-dev pkg-config g++ dataset-fashion-mnist \
            hdf5-filter-plugin hdf5-filter-plugin-blosc-serial hdf5-filter-plugin-zfp-serial
# The test suite also starts a real single-node Slurm and makes hosts out of network namespaces.
TEST_PKGS := slurm-wlm munge iproute2 procps util-linux libmpich-dev mpich python3-venv python3-h5py python3-pandas
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BIN      := target/release/hvtrain
FMNIST   := /usr/share/datasets/fashion-mnist
RANKS    ?= 2
JOB      ?= jobs/fashion-mnist.toml
# Open MPI refuses to run as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
MPIRUN   := mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1

.PHONY: deps test-deps install build test-build data demo test check-mpich bench lint nvrtc onnx-venv clean gpu-bundle docs

# NVRTC (CUDA's run-time compiler) from PyPI, unpacked: `make test` compiles every GPU kernel
# with it, without a GPU or a CUDA install (src/device/cuda/nvrtc.rs). Pinned: 12.x still
# targets compute_70 (Volta), which CUDA 13 dropped.
NVRTC_VERSION := 12.9.86
NVRTC_WHEEL   := nvidia_cuda_nvrtc_cu12-$(NVRTC_VERSION)-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
NVRTC_SHA256  := 210cf05005a447e29214e9ce50851e83fc5f4358df8b453155d5e1918094dcb4
NVRTC_DIR     := target/nvrtc
NVRTC_LIB     := $(CURDIR)/$(NVRTC_DIR)/nvidia/cuda_nvrtc/lib

# onnx and onnxruntime for tests/it/export.rs (the exported model checked and run against
# `hvtrain predict`), scikit-learn for tests/it/normalize.rs (hvtrain's R², MAE and RMSE
# against its own), and hdf5plugin for tests/it/compressed.rs (Zstd, Bitshuffle, Blosc2, SZ3 files
# as h5py writes them), pyarrow and pandas for tests/it/import.rs (Parquet as pandas writes it), in
# a virtual environment under target/, and tensorboard for tests/it/tensorboard.rs (its own reader
# and data provider read hvtrain's event files). Pinned; skipped when this set is
# already installed (the stamp names it). About 20 s from PyPI.
ONNX_PIP   := onnx==1.23.2 onnxruntime==1.31.1 numpy==2.4.6 h5py==3.16.0 scikit-learn==1.9.1 scipy==1.17.1 hdf5plugin==7.1.0 \
              pyarrow==26.0.1 pandas==3.1.1 tensorboard==2.21.0
ONNX_VENV  := target/onnx-venv
ONNX_STAMP := $(ONNX_VENV)/.installed-$(shell echo '$(ONNX_PIP)' | cksum | cut -d' ' -f1)

deps:
	@$(MAKE) --no-print-directory install PKGS="$(APT_PKGS)"
	@command -v cargo >/dev/null || { echo "make deps: cargo not found; install Rust (https://rustup.rs), then re-run"; exit 1; }

test-deps: deps
	@$(MAKE) --no-print-directory install PKGS="$(TEST_PKGS)"

install:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing Debian packages:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	else echo "make deps: Debian packages present:" $(PKGS); fi

build: deps
	cargo build --release

data: build data/fashion-mnist-train.h5 data/fashion-mnist-test.h5

data/fashion-mnist-train.h5:
	$(BIN) data import-idx $(FMNIST)/train-images-idx3-ubyte.gz $(FMNIST)/train-labels-idx1-ubyte.gz $@

data/fashion-mnist-test.h5:
	$(BIN) data import-idx $(FMNIST)/t10k-images-idx3-ubyte.gz $(FMNIST)/t10k-labels-idx1-ubyte.gz $@

demo: data
	$(MPIRUN) -n $(RANKS) $(BIN) train $(JOB) --resume auto
	$(BIN) plot "$$(sed -n 's/^dir *= *"\([^"]*\)".*/\1/p' $(JOB) | head -n 1)"

# As root (CI), tests/noroot.rs must run, not skip: it proves the build a user without root does.
NOROOT_REQ := $(shell [ "$$(id -u)" = 0 ] && echo HVTRAIN_REQUIRE_NOROOT=1)

# test-build first: one cargo run compiles the binary and the unit-test harness (each a single
# codegen unit, thin LTO) side by side on two cores, where `build` then `cargo test` compiled
# them one after the other (about 4 minutes of CI); `build` after it finds the binary fresh.
test: test-deps test-build build nvrtc gpu-bundle onnx-venv docs
	LD_LIBRARY_PATH=$(NVRTC_LIB):$$LD_LIBRARY_PATH HVTRAIN_REQUIRE_NVRTC=1 HVTRAIN_REQUIRE_BUNDLE=1 $(NOROOT_REQ) \
	  HVTRAIN_REQUIRE_ONNX=1 HVTRAIN_ONNX_PYTHON=$(CURDIR)/$(ONNX_VENV)/bin/python cargo test --release --no-fail-fast
	@if [ -n "$(NOROOT_REQ)" ]; then \
	  echo "check-mpich: not run: tests/noroot.rs built against MPICH and trained 2 ranks under its mpiexec"; \
	else $(MAKE) --no-print-directory check-mpich; fi

test-build: deps
	cargo test --release --no-run

# The code must build against MPICH too: build with MPICH's wrapper into target-mpich/ and
# train 2 ranks for one epoch under MPICH's mpirun (hydra). `make test` runs it where
# tests/noroot.rs cannot run (not root); as root (CI) that test already builds against MPICH
# (its wheel's, in a prefix) and trains 2 ranks under MPICH's mpiexec, so this would repeat it. The release profile is lightened
# (opt-level 1, no LTO, no debug info): the MPI calls compile and link the same, in about a
# third of the time.
FAST_RELEASE := CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=off \
                CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_DEBUG=false
check-mpich: data
	MPICC=mpicc.mpich $(FAST_RELEASE) cargo build --release --target-dir target-mpich
	rm -rf runs/check-mpich && mkdir -p runs
	timeout 300 mpirun.mpich -n 2 target-mpich/release/hvtrain train $(JOB) --set training.epochs=1 \
	  --set 'output.dir="runs/check-mpich"' 2>&1 | tee runs/check-mpich.log | grep -E "rank [0-9]/2 on|epoch 1/1:|done:"
	ldd target-mpich/release/hvtrain | grep -q libmpich && grep -q "done: test accuracy" runs/check-mpich.log
	@echo "check-mpich: built against MPICH and trained 2 ranks: ok"

bench: data
	bash bench/run.sh

# The book: mdBook from crates.io, pinned, built once without its server and file watcher (about
# 2-5 minutes on 2 cores; no Debian package has it) into the user's cache folder, so that a
# clean clone (CI's) on a machine that built it before does not build it again. `mdbook build` fails on a SUMMARY.md
# entry without its file; tests/it/docs.rs checks links and anchors, src/cli/docs_tests.rs the
# command lines.
MDBOOK_VERSION := 0.4.52
MDBOOK_ROOT   := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/hvtrain/mdbook-$(MDBOOK_VERSION)
MDBOOK        := $(MDBOOK_ROOT)/bin/mdbook

docs: $(MDBOOK)
	$(MDBOOK) build docs
	@echo "make docs: the book is in target/book/index.html"

$(MDBOOK):
	cargo install mdbook --version $(MDBOOK_VERSION) --locked --no-default-features --features search \
	  --root $(MDBOOK_ROOT) --quiet

# Skipped when this version is already unpacked (the stamp names it).
nvrtc: $(NVRTC_DIR)/.version-$(NVRTC_VERSION)

$(NVRTC_DIR)/.version-$(NVRTC_VERSION):
	rm -rf $(NVRTC_DIR) && mkdir -p $(NVRTC_DIR)/wheel
	python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux2014_x86_64 \
	  --python-version 3 --implementation py --abi none \
	  --dest $(NVRTC_DIR)/wheel nvidia-cuda-nvrtc-cu12==$(NVRTC_VERSION)
	echo "$(NVRTC_SHA256)  $(NVRTC_DIR)/wheel/$(NVRTC_WHEEL)" | sha256sum --check --quiet
	python3 -m zipfile -e $(NVRTC_DIR)/wheel/$(NVRTC_WHEEL) $(NVRTC_DIR)
	test -e $(NVRTC_LIB)/libnvrtc.so.12
	rm -rf $(NVRTC_DIR)/wheel
	touch $@

onnx-venv: $(ONNX_STAMP)

$(ONNX_STAMP):
	rm -rf $(ONNX_VENV)
	python3 -m venv $(ONNX_VENV)
	$(ONNX_VENV)/bin/pip install --quiet --disable-pip-version-check --only-binary=:all: $(ONNX_PIP)
	touch $@

# Clippy on every target, warnings as errors (clean on Rust 1.95). Not part of `make test`:
# a newer toolchain's new lints must not fail a run whose code did not change.
lint: deps
	cargo clippy --release --all-targets -- -D warnings

clean:
	cargo clean
	rm -rf target-mpich
	rm -rf runs data/*.h5

# The GPU check's bundle (docs/gpu-check.md): target/gpu-bundle/ (hvtrain, its libraries, a
# relocated Open MPI, Fashion-MNIST, the check scripts) and target/gpu-bundle.tar.xz to carry
# to a GPU machine, where `bash gpu-bundle/run-gpu-check.sh LOGDIR` runs it.
gpu-bundle: build
	bash tools/gpu-bundle.sh
