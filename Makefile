# make example : set up everything on a fresh machine and run the main example
# make test    : set up everything and run the C++ and Python test suites
# make example-gpt2 : trains a small GPT-2 on text shipped with scikit-learn, next to eager
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := protobuf-compiler libprotobuf-dev libgtest-dev cmake g++ make clang-format

.PHONY: example example-gpt2 test build system-deps test-cpp test-python bench docs lint

example: build
	$(PY) examples/train_digits_cnn.py

example-gpt2: build
	$(PY) examples/finetune_tiny_gpt2.py

test: build test-cpp test-python lint

system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; fi

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	touch $(STAMP)

build: system-deps $(STAMP)
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .

test-cpp: build
	cmake --build build/cmake --target ortmodule_cpp_tests -j 2
	cd build/cmake && ctest --output-on-failure -j 2

# pytest exits 5 when it collects no test: that is a failure here too.
test-python: build
	$(PY) -m pytest tests/python -q -ra

bench: build
	$(PY) benchmarks/bench_train_step.py

docs: build
	$(PY) tools/gen_ops_doc.py

lint: build
	$(PY) -m ruff check ortmodule tests benchmarks examples tools
	clang-format --dry-run -Werror $$(git ls-files 'csrc/*.cpp' 'csrc/*.h' 'tests/cpp/*.cpp')
