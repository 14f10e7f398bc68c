# The two set-up commands (README): `make demo` and `make test`. Both install what they need.
BUILD ?= build
JOBS ?= 2
PY := /usr/bin/python3
DEBS := cmake g++ make zlib1g-dev libbz2-dev liblzma-dev liblz4-dev libzstd-dev libcli11-dev nlohmann-json3-dev libspdlog-dev catch2 python3-torch python3-joblib libxxhash-dev libtorch-dev help2man groff-base

.PHONY: all deps build test test-torch2 test-torch2-ci torch2-root demo bench bench-detail bench-many clean sanitize sanitize-deps fuzz fuzz-quick fuzz-deps fuzz-build

all: build

# Idempotent and quick when everything is present: apt-get runs only for missing packages, and
# without their recommends: in a fresh Debian 12 minbase root, 415 packages (345 MB fetched) in
# 4m21s instead of 556 (405 MB) in 5m32s; the GTK, Qt, GStreamer, VA and systemd stacks were
# recommends, and `make test` there passes without them.
define install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install_missing,$(DEBS))

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# `make test-torch2`: real torch 2.6 on both ends (tests/torch2/test_torch2.py). The Debian 13 root
# with python3-torch 2.6 is made once (~1.6 GiB, some minutes) and kept in TORCH2_ROOT.
TORCH2_ROOT ?= /var/cache/ckpt-tool/trixie

torch2-root:
	@if [ ! -e $(TORCH2_ROOT)/.ready ]; then \
	  $(MAKE) --no-print-directory deps DEBS=debootstrap && rm -rf $(TORCH2_ROOT).tmp && mkdir -p $(dir $(TORCH2_ROOT)) && \
	  debootstrap --variant=minbase trixie $(TORCH2_ROOT).tmp http://deb.debian.org/debian && \
	  chroot $(TORCH2_ROOT).tmp apt-get install -y -qq --no-install-recommends python3-torch python3-numpy && \
	  touch $(TORCH2_ROOT).tmp/.ready && rm -rf $(TORCH2_ROOT) && mv $(TORCH2_ROOT).tmp $(TORCH2_ROOT); \
	fi

test-torch2: deps build torch2-root
	$(PY) tests/torch2/test_torch2.py --tool $(BUILD)/ckpt-tool --root $(TORCH2_ROOT)

# CI's run of it (.ci/run): a root that cannot be built (the archive out of reach) is said loudly and
# skipped; a test that fails fails the run.
test-torch2-ci: deps build
	@if $(MAKE) --no-print-directory torch2-root; then \
	  $(PY) tests/torch2/test_torch2.py --tool $(BUILD)/ckpt-tool --root $(TORCH2_ROOT); \
	else \
	  echo "test-torch2: SKIPPED — the Debian 13 root could not be built (debootstrap failed; see above)"; \
	fi

# The main job on the shipped samples: what is inside, why it will not load into a plain model, the
# repair. (diff-keys exits 1 when keys differ: that is the expected finding here.)
demo: deps build
	$(BUILD)/ckpt-tool inspect data/resnet_ddp.pth
	$(BUILD)/ckpt-tool inspect data/training.pth
	$(BUILD)/ckpt-tool strip-prefix data/resnet_ddp.pth -o $(BUILD)/resnet_plain.pth --force
	$(BUILD)/ckpt-tool diff-keys data/resnet_ddp.pth $(BUILD)/resnet_plain.pth; [ $$? -eq 1 ]
	$(BUILD)/ckpt-tool diff-keys $(BUILD)/resnet_plain.pth $(BUILD)/resnet_plain.pth
	$(BUILD)/ckpt-tool verify data/training.pth --write-fingerprint $(BUILD)/training.fp.json
	$(BUILD)/ckpt-tool verify data/training.pth $(BUILD)/training.fp.json --exact

# `make bench`: every command against torch and the floor, one table a command, and the targets
# (bench/run; docs/performance.md). BENCH_ARGS=--quick for the short run (no 1 GiB file, 3 runs).
# `make bench-detail`: the four detailed benchmarks, one a command.
# `make bench-many`: what one tensor costs, on 10,000 to 1,000,000 tensors and as a sharded
# safetensors index (bench/many_tensors.py; BENCH_ARGS=--counts 10000,100000 for a short run).
BENCH_ARGS ?=

bench: deps build
	$(PY) bench/run --tool $(BUILD)/ckpt-tool $(BENCH_ARGS)

bench-detail: deps build
	$(PY) bench/inspect_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/strip_prefix_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/verify_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/convert_bench.py --tool $(BUILD)/ckpt-tool

bench-many: deps build
	$(PY) bench/many_tensors.py --tool $(BUILD)/ckpt-tool $(BENCH_ARGS)

clean:
	rm -rf $(BUILD)

# Hardening (docs/hardening.md). Each has its own tree and installs what it needs, as deps does.
# `make sanitize`: every test with lib/, app/ and tests/ built with ASan + UBSan (gcc's runtimes:
# libasan8, libubsan1). The LibTorch backend is built in the same tree without sanitizers (LibTorch
# is not instrumented) and dlopened by the instrumented tool as usual. A sanitizer's exit code is 86,
# never the tool's 1 (findings) or 2 (error), so no test can take a report for an expected exit;
# AddressSanitizer reports also go to $(ASAN_BUILD)/sanitizer-logs/, which must stay empty (gcc's
# UBSan writes to stderr whatever log_path says). LeakSanitizer is on, with no suppressions
# (docs/hardening.md).
ASAN_BUILD ?= build-asan
# -O1 and line tables only: the instrumented tree builds in about half the time of -O2 -g, and
# reports still name file and line.
SAN_OPT ?= -O1 -g1
SAN_DEBS := libasan8 libubsan1
SAN_LOGS = $(abspath $(ASAN_BUILD))/sanitizer-logs
SAN_ENV = ASAN_OPTIONS=exitcode=86:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1:log_path=$(SAN_LOGS)/asan:log_exe_name=1 \
	UBSAN_OPTIONS=exitcode=86:print_stacktrace=1:halt_on_error=1

sanitize-deps: deps
	$(call install_missing,$(SAN_DEBS))

sanitize: sanitize-deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$(SAN_OPT)" -DCKPT_SANITIZE=ON
	@rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS)
	$(SAN_ENV) cmake --build $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j$(JOBS); rc=$$?; \
	if [ -n "$$(ls -A $(SAN_LOGS))" ]; then \
	  echo "sanitizer reports in $(SAN_LOGS):"; for f in $(SAN_LOGS)/*; do echo "== $$f"; cat $$f; done; exit 1; \
	fi; [ $$rc -eq 0 ] && echo "sanitize: all tests passed, no sanitizer reports"; exit $$rc

# `make fuzz`: the libFuzzer targets of fuzz/ (clang 14, its libFuzzer runtime in libclang-rt-14-dev,
# llvm-symbolizer in llvm), each run FUZZ_SECONDS from the seeds in fuzz/corpus/; findings land in
# fuzz/crashes/. `make fuzz-quick` is the CI size (25 s per target).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= zip pickle safetensors legacy json scan dist
FUZZ_DEBS := clang libclang-rt-14-dev llvm cmake make zlib1g-dev libbz2-dev liblzma-dev liblz4-dev libzstd-dev libcli11-dev nlohmann-json3-dev libspdlog-dev libxxhash-dev

fuzz-deps:
	$(call install_missing,$(FUZZ_DEBS))

fuzz-build: fuzz-deps
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD) -DCKPT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1"
	cmake --build $(FUZZ_BUILD) -j$(JOBS)

fuzz: fuzz-build
	fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

fuzz-quick:
	FUZZ_SEED=1 $(MAKE) fuzz FUZZ_SECONDS=25
