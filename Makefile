# Two commands set up everything on a fresh machine:
#   make demo   create .venv, install tensorfile, run the demo on generated sample files
#   make test   create .venv, install tensorfile[dev], run lint, type checks and the whole test suite
#               (in parallel worker processes: about 9 minutes on a 2-core machine from a fresh clone)
# make test also needs Java 17 (the Spark tests), Debian's chromium (installed with apt-get when
# run as root) and about 6 GB for .venv: tools/check_prereqs.py says what is missing first.
# `make bench` runs the benchmark runner (not part of the tests).

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# torch is pinned here: 2.13.0 is the CPU build on these machines (see constraints.txt).
INSTALL := $(PIP) install -c constraints.txt
# ztensor 2.1.2 (zTensor v2) cannot share an environment with ztensor 1.0.1 (the v1.0 oracle
# in .venv): the interoperability tests and the v2 benchmark rows run it from its own venv.
ZT2 := .venv-zt2

.PHONY: demo test prereqs lint typecheck pytest bench reference-suite clean lock docs docs-serve browser

# An editable install (pip install -e .) follows the package's source, but setup.py copies
# the import hook's .pth line into site-packages at install time: a change to either
# reinstalls, so no venv keeps an old hook.
HOOK := setup.py src/tensorfile-patch.pth

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip

$(VENV)/.core: $(PY) pyproject.toml constraints.txt $(HOOK)
	$(INSTALL) -e .
	touch $@

# MosaicML Streaming, a peer of the training-feed benchmarks, is installed on its own with
# --no-deps: it pins numpy<2.2, transformers<5 and xxhash<4 (this project uses numpy 2.4,
# transformers 5, xxhash 4; its code works with them) and requires torchvision (whose PyPI
# wheel does not load against the CPU torch; the benchmarks stub out `streaming.vision`) and
# every cloud SDK. Its run-time needs (Brotli, python-snappy, zstd, catalogue, boto3, xxhash)
# are in the dev extras.
STREAMING := mosaicml-streaming==0.13.0
# LitData (Lightning's litdata, another feed peer; its version is pinned in constraints.txt)
# requires torchvision, which it imports only to decode images and video (unused here) and
# whose wheel does not load against the CPU torch, and tifffile (TIFF images, also unused):
# installed with --no-deps too. Its other run-time needs (lightning-utilities, boto3,
# obstore, filelock, requests) come with the dev extras.
LITDATA := litdata

# --no-compile: pip would byte-compile all ~27,000 modules of the dev packages (a minute of
# one core, on the path of every fresh make test); .warm compiles the ~4,000 the suite imports
$(VENV)/.dev: $(PY) pyproject.toml constraints.txt $(HOOK)
	$(INSTALL) -e '.[dev]' --no-compile
	$(PIP) install --no-compile --no-deps $(STREAMING)
	$(INSTALL) --no-compile --no-deps $(LITDATA)
	touch $@ $(VENV)/.core

$(VENV)/.warm: $(VENV)/.dev tools/warm_bytecode.py
	env -u PYTHONDONTWRITEBYTECODE $(PY) tools/warm_bytecode.py
	touch $@

$(ZT2)/.ready: constraints.txt
	$(PYTHON) -m venv $(ZT2)
	$(ZT2)/bin/python -m pip --disable-pip-version-check -q install -c constraints.txt ztensor==2.1.2 numpy
	touch $@

# the v2 benchmark rows run tensorfile beside ztensor 2.1.2 in one process
$(ZT2)/.bench: $(ZT2)/.ready pyproject.toml $(HOOK)
	$(ZT2)/bin/python -m pip --disable-pip-version-check -q install -c constraints.txt -e . safetensors==0.8.0
	touch $@

demo: $(VENV)/.core
	$(PY) examples/demo.py demo-output

lint: $(VENV)/.dev
	$(PY) -m ruff check src tests benchmarks examples tools docs/hooks conftest.py
	$(PY) -m ruff format --check src tests benchmarks examples tools docs/hooks conftest.py

typecheck: $(VENV)/.dev
	$(PY) -m mypy

# what make test needs beyond Python and make (Java 17, chromium or root to install it, disk
# space for .venv): one line for each missing piece, before anything is installed
prereqs:
	@$(PYTHON) tools/check_prereqs.py

# the docs site's smoke test opens the built site in Debian's chromium (tests/docs/test_site.py);
# installed here as root (prereqs stops anyone else with what to install)
browser: prereqs
	@command -v chromium >/dev/null || { apt-get update -q && apt-get install -y -q chromium; }

# The suite runs in $(TEST_WORKERS) worker processes (pytest-xdist): most of its time is spent
# waiting (on subprocesses, servers, Spark's JVMs), so four workers finish it in about half
# the time of one on a 2-core machine. --dist loadgroup hands out tests one by one, except the
# groups of tests/conftest.py (the Spark tests run on one worker and one Spark cluster, two
# of each with more than two cores; the tests of the optional frameworks on one worker, the
# only one that imports them) and tests/distributed/conftest.py (a module's group of ranks);
# the session fixtures are per worker, or shared by the workers (tests/helpers/workers.py).
# `make pytest TEST_WORKERS=0` runs it in one process.
TEST_WORKERS ?= 4

# Python may keep compiled modules (and pytest its rewritten test modules) in __pycache__,
# whatever the shell says: each worker, CLI run and Spark Python worker of the suite would
# otherwise compile src/ and tests/ again
pytest: prereqs $(VENV)/.warm $(ZT2)/.ready browser
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadgroup --durations=25 tests --doctest-modules src/tensorfile

# the two venvs are installed side by side (pip uses one core each), then lint and type checks
# run beside the suite (its workers spend their first minute collecting; any failure fails make)
test: prereqs
	@$(MAKE) --no-print-directory -j2 $(VENV)/.dev $(ZT2)/.ready
	@$(MAKE) --no-print-directory -j3 lint typecheck pytest

# Material for MkDocs prints an end-of-life banner on every build unless this is set (the
# banner names it): for `make docs`, `make docs-serve` and the site's build in `make test`
export NO_MKDOCS_2_WARNING := 1

# the documentation site (mkdocs.yml, docs/) into $(SITE), strictly: a broken link, a missing
# reference target or a docstring that cannot be rendered fails it. make test builds it too
# (tests/docs/test_site.py runs this target).
SITE := site
docs: $(VENV)/.dev
	$(PY) -m mkdocs build --strict -d $(SITE)

# the site at http://127.0.0.1:8000, rebuilt as docs/ and the docstrings change
docs-serve: $(VENV)/.dev
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

bench: $(VENV)/.dev $(ZT2)/.bench
	$(PY) -m benchmarks.run

# The reference's own tests through an import swap: make reference-suite REF=/path/to/safetensors
reference-suite: $(VENV)/.dev
	$(PY) tools/reference_suite.py $(REF)

# rewrite constraints.txt's pins from the current .venv (its comments and the torch pin stay)
lock: $(VENV)/.dev
	{ sed -n '1,/^torch==/p' constraints.txt; \
	  $(PY) -m pip freeze --exclude-editable | grep -v -i -E '^(torch|tensorfile|ztensor|mosaicml-streaming)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) $(ZT2) demo-output bench-data site .pytest_cache .mypy_cache .ruff_cache
