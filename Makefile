# hvtrain: the two commands a newcomer needs.
#   make demo   installs what is needed, builds, converts Fashion-MNIST to HDF5 and trains
#               784-512-512-10 on 2 ranks with mpirun (CPU).
#   make test   installs what is needed and runs every test, multi-rank ones under mpirun.
# Other targets: deps, build, data, bench, clean.

APT_PKGS := libopenmpi-dev openmpi-bin libhdf5-dev libclang-dev pkg-config dataset-fashion-mnist
# The test suite also starts a real single-node Slurm and makes hosts out of network namespaces.
TEST_PKGS := slurm-wlm munge iproute2 procps util-linux libmpich-dev mpich
SUDO     := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
BIN      := target/release/hvtrain
FMNIST   := /usr/share/datasets/fashion-mnist
RANKS    ?= 2
JOB      ?= jobs/fashion-mnist.toml
# Open MPI refuses to run as root without these; harmless otherwise.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
MPIRUN   := mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1

.PHONY: deps test-deps install build data demo test check-mpich bench clean gpu-bundle

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

test: test-deps build
	cargo test --release
	$(MAKE) --no-print-directory check-mpich

# The code must build against MPICH too: build with MPICH's wrapper into target-mpich/ and
# train 2 ranks for one epoch under MPICH's mpirun (hydra).
check-mpich: data
	MPICC=mpicc.mpich cargo build --release --target-dir target-mpich
	rm -rf runs/check-mpich && mkdir -p runs
	timeout 300 mpirun.mpich -n 2 target-mpich/release/hvtrain train $(JOB) --set training.epochs=1 \
	  --set 'output.dir="runs/check-mpich"' 2>&1 | tee runs/check-mpich.log | grep -E "rank [0-9]/2 on|epoch 1/1:|done:"
	ldd target-mpich/release/hvtrain | grep -q libmpich && grep -q "done: test accuracy" runs/check-mpich.log
	@echo "check-mpich: built against MPICH and trained 2 ranks: ok"

bench: data
	bash bench/run.sh

clean:
	cargo clean
	rm -rf target-mpich
	rm -rf runs data/*.h5

# The GPU check's bundle (docs/gpu-check.md): target/gpu-bundle/ (hvtrain, its libraries, a
# relocated Open MPI, Fashion-MNIST, the check scripts) and target/gpu-bundle.tar.xz to carry
# to a GPU machine, where `bash gpu-bundle/run-gpu-check.sh LOGDIR` runs it.
gpu-bundle: build
	bash tools/gpu-bundle.sh
