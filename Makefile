# Two commands for readers: `make book` and `make test`. Both create .venv on first use.
#
#   PYTHON=python3.12 make test     choose the interpreter for the virtual environment
#   TORCH_SPEC="torch==2.13.0"      the torch requirement installed first (a GPU user can
#                                   set e.g. TORCH_SPEC=torch to take PyPI's CUDA build)

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.course-installed
export PATH := $(abspath $(BIN)):$(PATH)
export COURSE_CACHE ?= $(abspath _build/cache)
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# every target checks: a chapter claim that fails is an error (a reader's kernel shows a notice)
export COURSE_STRICT_CLAIMS := 1

.PHONY: book test test-portable test-bf16 test-jupyter gpu-check bands install system-deps release clean help

help:
	@echo "make book   - set up .venv, execute every chapter and build the HTML book"
	@echo "make test   - set up .venv, then run the whole test suite"
	@echo "make test-portable - run every chapter (claims and checked outputs) as another machine would:"
	@echo "                     other CPU kernels, one thread, every model trained afresh"
	@echo "make test-bf16 - run every chapter (claims and checked outputs) under a GPU's numerics on the CPU:"
	@echo "                 bf16 autocast (COURSE_PRECISION=bf16), its own model cache (slow: ~30 CPU-minutes)"
	@echo "make test-jupyter - install JupyterLab into .venv, run the widgets in it with a kernel (headless Chromium)"
	@echo "make gpu-check - on a CUDA machine: every chapter, the claims, course bench at BERT-base size,"
	@echo "                 train --compile and torchrun; report in _build/gpu-check/ (<= 5 minutes)"
	@echo "make bands  - re-measure every chapter claim under several seeds and kernel sets (slow)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "Python 3.10+ is required, found " + sys.version.split()[0]'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/python -m pip install --quiet -e ".[book,test]"
	touch $(STAMP)

install: $(STAMP)

# Chromium (browser test of the built book) and bubblewrap (the grader's sandbox), from
# Debian/Ubuntu packages when we may install them; otherwise those tests say why they skip.
system-deps:
	@missing=""; command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) \
	      || echo "warning: could not install$$missing"; \
	  else echo "note:$$missing not installed and not installable here (needs root + apt-get)"; fi; \
	fi

book: $(STAMP)
	$(BIN)/course book

# The suite in two halves that run side by side on a 2-core machine: the book (its build executes
# every chapter once, mostly training on 2 threads; then the chapters' checked outputs and
# claims, the pages, a browser) and everything else on 1 thread (unit and parity tests, the
# grader, the solution notebooks under nbval), at a lower priority: the book is the longer
# half, so it gets the CPU first and the rest fills the gaps. Idle threads sleep
# (OMP_WAIT_POLICY=PASSIVE) instead of spinning. The book half's output is printed when both
# are done; make test fails if either fails.
test: $(STAMP) system-deps
	$(BIN)/ruff check course_lib tests benchmarks
	$(BIN)/ruff format --check course_lib tests benchmarks
	@mkdir -p _build; \
	OMP_WAIT_POLICY=PASSIVE $(BIN)/python -m pytest tests/tools/test_book.py -p no:cacheprovider --durations=5 \
	  > _build/test-book.log 2>&1 & book=$$!; trap 'kill $$book 2>/dev/null' INT TERM; \
	OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE nice -n 10 $(BIN)/python -m pytest tests solutions --ignore=tests/tools/test_book.py \
	  --nbval-lax --nbval-current-env --durations=15; rest=$$?; \
	wait $$book; book_rc=$$?; \
	echo; echo "=== the book half (tests/tools/test_book.py): _build/test-book.log ==="; cat _build/test-book.log; \
	echo "the rest: exit $$rest; the book: exit $$book_rc"; \
	test $$rest -eq 0 && test $$book_rc -eq 0

# Another machine, simulated: PyTorch's portable CPU kernels instead of this CPU's SIMD ones,
# one thread (another summation order), and an empty model cache so every model is trained
# under those settings. Every claim and every exactly-checked output must still hold.
PORTABLE_CACHE := $(abspath _build/cache-portable)
test-portable: $(STAMP)
	rm -rf $(PORTABLE_CACHE)
	ATEN_CPU_CAPABILITY=default OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 COURSE_CACHE=$(PORTABLE_CACHE) \
	  $(BIN)/python -m pytest book --nbval-lax --nbval-current-env --durations=5

# A GPU's numerics, on the CPU: every chapter trains under bf16 autocast (the code path CUDA
# takes, COURSE_PRECISION=bf16); the models are cached under keys that include the precision,
# in their own folder. Every claim and every exactly-checked output must still hold.
BF16_CACHE := $(abspath _build/cache-bf16)
test-bf16: $(STAMP)
	COURSE_PRECISION=bf16 COURSE_DEVICE=cpu COURSE_CACHE=$(BF16_CACHE) \
	  $(BIN)/python -m pytest book --nbval-lax --nbval-current-env --durations=5

# The widgets in a real Jupyter front end with a kernel (tests/widgets/test_widgets_jupyter.py): JupyterLab
# is not a course dependency, so this target installs it into the build environment first.
test-jupyter: $(STAMP) system-deps
	$(BIN)/python -m pip install --quiet jupyterlab
	OMP_NUM_THREADS=1 COURSE_REQUIRE_BROWSER=1 $(BIN)/python -m pytest tests/widgets/test_widgets_jupyter.py -p no:cacheprovider -s

# The one prepared GPU check (benchmarks/gpu_check.py): writes _build/gpu-check/report.{json,md}
# after every step, downloads nothing.
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py

bands: $(STAMP)
	$(BIN)/python benchmarks/claim_bands.py

release: $(STAMP)
	$(BIN)/course release --all

clean:
	rm -rf _build
