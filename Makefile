# The two set-up commands (README): `make demo` and `make test`. Both install what they need.
BUILD ?= build
JOBS ?= 2
PY := /usr/bin/python3
DEBS := cmake g++ make zlib1g-dev libcli11-dev nlohmann-json3-dev libspdlog-dev catch2 python3-torch libxxhash-dev libtorch-dev

.PHONY: all deps build test demo bench clean

all: build

# Idempotent and quick when everything is present: apt-get runs only for missing packages.
deps:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j$(JOBS)

test: deps build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

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

bench: deps build
	$(PY) bench/inspect_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/strip_prefix_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/verify_bench.py --tool $(BUILD)/ckpt-tool
	$(PY) bench/convert_bench.py --tool $(BUILD)/ckpt-tool

clean:
	rm -rf $(BUILD)
