# make example : set up everything on a fresh machine and run the main example
# make test    : set up everything and run the C++ and Python test suites
# make cpp-example : trains an MLP from on-device training artifacts in plain C++
# make example-gpt2 : trains a small GPT-2 on text shipped with scikit-learn, next to eager
# make wheel   : builds the CPU wheel into dist/ (make wheel-test: installs it into a clean venv)
# make gpu-bundle : packs protobuf/flatbuffers and the protobuf source into .gpu/ for building
#                on a GPU machine without them (tools/gpu_check.sh there; docs/install.md)
# make bench   : eager vs torch.compile vs ORTModule training steps (benchmarks/run.py)
# make lock    : resolves every venv's distributions anew into locks/ (commit them; see below)
# make fuzz    : fuzzes model loading and running (libFuzzer + ASan/UBSan) for FUZZ_SECONDS,
#                then checkpoint parsing for FUZZ_CHECKPOINT_SECONDS
PYTHON ?= python3.11
# Compiler warnings are errors in every build made here (a user's `pip install` warns only).
export ORTMODULE_WERROR := 1
# Every CMake build made here compiles through ccache (tools/compiler_launcher.sh), with paths
# taken relative to the checkout, so that another clone on this machine reuses the objects.
export CMAKE_CXX_COMPILER_LAUNCHER := $(CURDIR)/tools/compiler_launcher.sh
export CMAKE_CUDA_COMPILER_LAUNCHER := $(CURDIR)/tools/compiler_launcher.sh
export CCACHE_BASEDIR := $(CURDIR)
export CCACHE_NOHASHDIR := 1
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.requirements-stamp
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
DEBIAN_PACKAGES := protobuf-compiler libprotobuf-dev libgtest-dev cmake g++ make clang-format \
                   clang libclang-rt-14-dev flatbuffers-compiler libflatbuffers-dev \
                   dpkg-dev ccache

.PHONY: example example-gpt2 finetune-example test build check-locks lock ref-venv cpp-lib cpp-example system-deps test-cpp test-python bench docs lint fuzz \
        fuzz-build test-cpp-asan wheel wheel-test cuda-check torch-range-check gpu-bundle

example: build
	$(PY) examples/train_digits_cnn.py

example-gpt2: build
	$(PY) examples/finetune_tiny_gpt2.py

# ORTTrainer vs transformers.Trainer fine-tuning a tiny BERT on examples/data/sentiment.csv
finetune-example: build
	$(PY) examples/finetune_tiny_bert.py

# The CUDA build is checked too where nvcc exists (make cuda-check).
NVCC := $(shell command -v nvcc 2>/dev/null || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; })
# Each stage runs as its own make (the build once, first) and its wall time is printed at
# the end (tools/stages.py).
TEST_STAGES := build check-locks test-cpp test-python lint fuzz test-cpp-asan $(if $(NVCC),cuda-check)
test:
	@$(PYTHON) tools/stages.py "$(MAKE)" $(TEST_STAGES)

system-deps:
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; fi

# Every venv installs exactly its lock (locks/*.txt, pip constraints holding every
# distribution, transitive ones included) and is checked against it (tools/check_lock.py).
# $(call locked_venv,VENV,REQUIREMENTS,LOCK): VENV made from REQUIREMENTS held to LOCK.
define locked_venv
	$(PYTHON) -m venv $(1)
	$(1)/bin/python -m pip install -q -c $(3) pip
	$(1)/bin/python -m pip install -q -c $(3) -r $(2)
endef
MAIN_LOCK := locks/main.txt
$(STAMP): requirements.txt $(MAIN_LOCK)
	$(call locked_venv,$(VENV),requirements.txt,$(MAIN_LOCK))
	$(PY) tools/check_lock.py $(MAIN_LOCK)
	touch $(STAMP)

build: system-deps $(STAMP)
	$(PY) -m pip install -q --no-build-isolation --no-deps -e .

# The reference runtime for the on-device training interoperability tests, in its own venv
# (it pins numpy<2 and an older onnx, and conflicts with the stock onnxruntime package).
REF_VENV := .venv-ref
REF_PY := $(REF_VENV)/bin/python
REF_STAMP := $(REF_VENV)/.requirements-stamp
REF_LOCK := locks/ref.txt
REF_NO_DEPS := onnxruntime-training-cpu==1.19.2
$(REF_STAMP): tests/interop/requirements-ref.txt $(REF_LOCK)
	$(call locked_venv,$(REF_VENV),tests/interop/requirements-ref.txt,$(REF_LOCK))
	$(REF_PY) -m pip install -q -c $(REF_LOCK) --no-deps $(REF_NO_DEPS)
	$(REF_PY) tools/check_lock.py $(REF_LOCK)
	touch $(REF_STAMP)
ref-venv: $(REF_STAMP)

# Every venv this checkout has made matches its lock (a stage of make test).
check-locks: build ref-venv
	$(PY) tools/check_lock.py $(MAIN_LOCK)
	$(REF_PY) tools/check_lock.py $(REF_LOCK)
	@[ ! -x $(CUDA_PY) ] || $(CUDA_PY) tools/check_lock.py $(CUDA_LOCK)
	@[ ! -x $(TORCH_RANGE_PY) ] || $(TORCH_RANGE_PY) tools/check_lock.py $(TORCH_RANGE_LOCK)

# Resolves every venv's distributions anew (the newest that requirements.txt and the other
# requirement files allow) into locks/: review the diff, run make test, commit.
lock: system-deps
	mkdir -p build/locks
	$(PYTHON) tools/lock.py $(MAIN_LOCK) -r requirements.txt
	$(PYTHON) tools/lock.py $(REF_LOCK) -r tests/interop/requirements-ref.txt --no-deps $(REF_NO_DEPS)
	sed 's/^torch==.*/torch==$(CUDA_TORCH)/' requirements.txt > build/locks/cuda.txt
	$(PYTHON) tools/lock.py $(CUDA_LOCK) -r build/locks/cuda.txt \
	  --source "requirements.txt with torch==$(CUDA_TORCH)"
	sed $(TORCH_RANGE_SED) requirements.txt > build/locks/torch-range.txt
	$(PYTHON) tools/lock.py $(TORCH_RANGE_LOCK) -r build/locks/torch-range.txt \
	  --source "requirements.txt with $(TORCH_RANGE_SED)"

# The standalone C++ training library, its example and the C++ API checks (no torch, no Python).
cpp-lib: build
	cmake --build build/cmake --target ortmodule_training train_mlp training_api_checks -j 2

# Trains an MLP from plain C++ on artifacts made by the Python API.
cpp-example: cpp-lib
	$(PY) examples/cpp/make_artifacts.py build/cpp_example
	build/cmake/train_mlp build/cpp_example

test-cpp: build
	cmake --build build/cmake --target ortmodule_cpp_tests -j 2
	cd build/cmake && ctest --output-on-failure -j 2

# pytest exits 5 when it collects no test: that is a failure here too.
test-python: build ref-venv cpp-lib
	$(PY) -m pytest tests/python -q -ra

# The CPU wheel (docs/install.md) in dist/, and its test alone (test-python runs it too):
# built, installed into a clean venv with only pip and torch, trains an MLP like eager.
wheel: build
	$(PY) -m build --wheel --no-isolation --outdir dist .

wheel-test: build
	$(PY) -m pytest tests/python/test_wheel.py -q -ra

bench: build
	$(PY) benchmarks/run.py

gpu-bundle: build
	tools/gpu_bundle.sh

docs: build
	$(PY) tools/gen_ops_doc.py

lint: build
	$(PY) -m ruff check ortmodule tests benchmarks examples tools
	clang-format --dry-run -Werror $$(git ls-files 'csrc/*.cpp' 'csrc/*.h' 'csrc/*.cu' 'tests/cpp/*.cpp' 'tests/cpp_api/*.cpp' \
	  'examples/cpp/*.cpp' 'tests/fuzz/*.cpp')

# ---- fuzzing: bytes -> load -> plan -> run, clang + libFuzzer + ASan/UBSan, no torch ----
FUZZ_DIR := build/fuzz
FUZZ_SECONDS ?= 60
FUZZ_CHECKPOINT_SECONDS ?= 30
FUZZ_FLAGS ?= -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 -max_len=65536 \
              -print_final_stats=1
fuzz-build: system-deps $(STAMP)
	CC=clang CXX=clang++ cmake -S tests/fuzz -B $(FUZZ_DIR) -DPYTHON_EXECUTABLE=$(abspath $(PY)) \
	  > /dev/null
	cmake --build $(FUZZ_DIR) --target fuzz_load_run fuzz_checkpoint make_checkpoint_seeds -j 2

# New crashes are written to build/fuzz/crash-* (or leak-*, timeout-*, oom-*); minimise one with
#   build/fuzz/fuzz_load_run -minimize_crash=1 -runs=10000 build/fuzz/crash-...
# and add it to tests/fuzz/regressions/ (tests/python/test_model_safety.py replays them).
# Then the checkpoint parser (fuzz_checkpoint) for FUZZ_CHECKPOINT_SECONDS: its findings are
# build/fuzz/checkpoint-crash-* and go to tests/fuzz/regressions_checkpoint/
# (tests/python/test_checkpoint_format.py replays them).
fuzz: fuzz-build
	rm -rf $(FUZZ_DIR)/seeds && mkdir -p $(FUZZ_DIR)/corpus
	$(PY) tests/fuzz/make_seeds.py $(FUZZ_DIR)/seeds
	$(FUZZ_DIR)/fuzz_load_run $(FUZZ_FLAGS) -artifact_prefix=$(FUZZ_DIR)/ \
	  $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seeds tests/fuzz/regressions > $(FUZZ_DIR)/last.log 2>&1; \
	  rc=$$?; if [ $$rc -ne 0 ]; then tail -n 60 $(FUZZ_DIR)/last.log; \
	  else grep -E 'INFO: seed corpus|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss' \
	  $(FUZZ_DIR)/last.log; fi; exit $$rc
	rm -rf $(FUZZ_DIR)/checkpoint_seeds && mkdir -p $(FUZZ_DIR)/checkpoint_corpus
	$(FUZZ_DIR)/make_checkpoint_seeds $(FUZZ_DIR)/checkpoint_seeds
	$(FUZZ_DIR)/fuzz_checkpoint $(FUZZ_FLAGS) -max_total_time=$(FUZZ_CHECKPOINT_SECONDS) \
	  -artifact_prefix=$(FUZZ_DIR)/checkpoint- $(FUZZ_DIR)/checkpoint_corpus \
	  $(FUZZ_DIR)/checkpoint_seeds tests/fuzz/regressions_checkpoint \
	  > $(FUZZ_DIR)/last_checkpoint.log 2>&1; \
	  rc=$$?; if [ $$rc -ne 0 ]; then tail -n 60 $(FUZZ_DIR)/last_checkpoint.log; \
	  else grep -E 'INFO: seed corpus|Done [0-9]+ runs|stat::number_of_executed_units|stat::peak_rss' \
	  $(FUZZ_DIR)/last_checkpoint.log; fi; exit $$rc

# The C++ GoogleTest suite built with clang, ASan and UBSan over the serial backend (no torch).
test-cpp-asan: fuzz-build
	cmake --build $(FUZZ_DIR) --target cpp_tests_asan -j 2
	# The sanitized engine frees blocks at once instead of caching them (so that ASan sees
	# every use after free) and loops run serially: the tests counting cache misses and
	# torch's threads, and the cache's reuse and statistics, do not apply.
	$(FUZZ_DIR)/cpp_tests_asan --gtest_filter=-Planner.InPlaceReuseOfDeadBuffer:Threads.ParallelForUsesTorchThreadPool:Allocator.FreedLargeBlockServesSmallerRequestsAndMergesBack:Allocator.StatsCountLiveAndCachedBytes:Allocator.EmptyCacheKeepsSegmentsInUse

# ---- the CUDA build: nvcc plus the CUDA build of torch, checked on a machine without a GPU ----
# Its own venv (torch $(CUDA_TORCH), about 6 GB, kept between runs by its stamp) and its own copy
# of the tree (build/cuda-tree, kept too, so that CMake and ccache rebuild only what changed):
# the CUDA _C never replaces the CPU build's. The check builds it, imports it (CUDA kernels
# compiled in, no device), and runs the CUDA tests plus a representative part of the CPU suite
# on that build (CUDA_CHECK_TESTS); tests that need a GPU skip, saying so.
CUDA_TORCH := 2.14.1
CUDA_VENV := .venv-cuda
CUDA_PY := $(abspath $(CUDA_VENV))/bin/python
CUDA_STAMP := $(CUDA_VENV)/.requirements-stamp
CUDA_TREE := build/cuda-tree
CUDA_CHECK_TESTS ?= tests/python/test_cuda.py tests/python/test_fused_optim_cuda.py tests/python/test_ops.py tests/python/test_autograd_boundary.py \
                    tests/python/test_low_precision_products.py \
                    tests/python/test_models_api.py tests/python/test_docs.py
# $(call torch_venv,VENV,SED,LOCK): a venv with requirements.txt, its pins rewritten by
# sed's SED, held to LOCK.
define torch_venv
	mkdir -p $(1)
	sed $(2) requirements.txt > $(1)/requirements.txt
	$(call locked_venv,$(1),$(1)/requirements.txt,$(3))
	$(1)/bin/python tools/check_lock.py $(3)
	touch $(1)/.requirements-stamp
endef
# $(call build_tree,PYTHON,TREE,ORTMODULE_CUDA): the working tree (tracked and untracked,
# ignored files aside) copied into TREE, and _C built there in place with PYTHON's torch.
define build_tree
	mkdir -p $(2)
	git ls-files -co --exclude-standard -z | xargs -0 tar -c --ignore-failed-read -f - | \
	  tar -x -f - -C $(2)
	cd $(2) && PATH="$(dir $(NVCC)):$$PATH" ORTMODULE_CUDA=$(3) $(1) setup.py -q build_ext --inplace
endef
# $(call check_cuda_build,PYTHON,TREE): TREE's _C imports and has its CUDA kernels compiled in.
define check_cuda_build
	@[ -n "$(NVCC)" ] || { echo "$@ needs nvcc (the CUDA toolkit) on the PATH"; exit 1; }
	$(call build_tree,$(1),$(2),1)
	cd $(2) && $(1) -c "import torch, ortmodule._C as C; i = C.cuda_info(); \
	  print('CUDA build:', torch.__version__, len(i['kernels']), 'CUDA kernels,', \
	  i['device_count'], 'devices'); assert i['compiled'] and i['kernels'], i; \
	  assert C._fused_optimizers_have_cuda_kernels()"
endef

CUDA_LOCK := locks/cuda.txt
$(CUDA_STAMP): requirements.txt $(CUDA_LOCK)
	$(call torch_venv,$(CUDA_VENV),'s/^torch==.*/torch==$(CUDA_TORCH)/',$(CUDA_LOCK))

cuda-check: system-deps $(CUDA_STAMP)
	$(CUDA_PY) tools/check_lock.py $(CUDA_LOCK)
	$(call check_cuda_build,$(CUDA_PY),$(CUDA_TREE))
	cd $(CUDA_TREE) && PYTHONPATH=. ORTMODULE_EXPECT_CUDA_BUILD=1 $(CUDA_PY) -m pytest $(CUDA_CHECK_TESTS) -q -ra

# ---- the oldest torch the build supports, checked: the same steps against torch 2.11 ----
# (docs/install.md). Its own venv (torch $(TORCH_RANGE_TORCH) from the package index, its
# CUDA 13 build, about 5 GB; setuptools below 82, which that torch requires) and its own
# trees: the CPU-only build (ORTMODULE_CUDA=0) runs TORCH_RANGE_TESTS, the CUDA build (where
# nvcc exists) imports and runs the CUDA tests. Not part of `make test`: a 5 GB download.
TORCH_RANGE_TORCH := 2.11.0
TORCH_RANGE_VENV := .venv-torch-range
TORCH_RANGE_PY := $(abspath $(TORCH_RANGE_VENV))/bin/python
TORCH_RANGE_STAMP := $(TORCH_RANGE_VENV)/.requirements-stamp
TORCH_RANGE_TREE := build/torch-range-tree
TORCH_RANGE_TESTS ?= tests/python/test_ops.py tests/python/test_fused_optim.py \
                     tests/python/test_models_training.py tests/python/test_transformers.py
TORCH_RANGE_CUDA_TESTS ?= tests/python/test_cuda.py tests/python/test_fused_optim_cuda.py
TORCH_RANGE_LOCK := locks/torch-range.txt
TORCH_RANGE_SED := -e 's/^torch==.*/torch==$(TORCH_RANGE_TORCH)/' -e 's/^setuptools==.*/setuptools==81.0.0/'
$(TORCH_RANGE_STAMP): requirements.txt $(TORCH_RANGE_LOCK)
	$(call torch_venv,$(TORCH_RANGE_VENV),$(TORCH_RANGE_SED),$(TORCH_RANGE_LOCK))

torch-range-check: system-deps $(TORCH_RANGE_STAMP)
	$(TORCH_RANGE_PY) tools/check_lock.py $(TORCH_RANGE_LOCK)
	$(call build_tree,$(TORCH_RANGE_PY),$(TORCH_RANGE_TREE)/cpu,0)
	cd $(TORCH_RANGE_TREE)/cpu && PYTHONPATH=. $(TORCH_RANGE_PY) -m pytest $(TORCH_RANGE_TESTS) \
	  -q -ra -m "not slow"
	$(if $(NVCC),$(call check_cuda_build,$(TORCH_RANGE_PY),$(TORCH_RANGE_TREE)/cuda))
	$(if $(NVCC),cd $(TORCH_RANGE_TREE)/cuda && PYTHONPATH=. ORTMODULE_EXPECT_CUDA_BUILD=1 \
	  $(TORCH_RANGE_PY) -m pytest $(TORCH_RANGE_CUDA_TESTS) -q -ra)
