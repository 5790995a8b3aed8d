# GRPO Doctor: `make demo` shows the dashboard, `make test` runs the tests. Both install first.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

# Torch is pinned here, for these machines only: a CPU wheel of 2.13.0 lies on their disk, while an unpinned
# install in a fresh venv resolves pyproject's `torch>=2.2` to the newest release with CUDA and some twenty
# nvidia packages (several GB). pyproject.toml keeps `torch>=2.2` for users; override with
# `make install TORCH_SPEC=torch` (or any other pip requirement) elsewhere.
TORCH_SPEC ?= torch==2.13.0

# Written after a successful install: re-running `make install` is instant until pyproject.toml changes.
STAMP := $(VENV)/.grpo-doctor-installed

# The suite on two workers, a file per worker at a time (a file's tests share its fixtures and run in order):
# much of it waits on subprocesses, servers and the browser (on 2 cores: 7.5 minutes against 11.7 on one worker).
# Files go out in collection order, tests/e2e first: xdist's default hands out the files with most tests first,
# which left the few-but-long browser files for last, one worker idle beside them (8 min 18 s against 6 min 39 s
# in back-to-back runs here).
TEST_WORKERS ?= 2

DEMO_DB   ?= demo.db
DEMO_HOST ?= 127.0.0.1
DEMO_PORT ?= 8501

.PHONY: install test demo browser screenshot peer

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install '$(TORCH_SPEC)' -e '.[train,test]'
	touch $@

test: install browser
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The README's picture of the Run page (docs/img/run-page.png), taken by the browser test.
screenshot: install browser
	$(BIN)/python -m pytest -q tests/e2e/test_browser.py -k restart_a_sick_one
	mkdir -p docs/img && cp artifacts/screenshots/readme-run-page.png docs/img/run-page.png

# The closest peer, rldoctor, in a venv of its own (it is no dependency of ours), for
# `benchmarks/eval_real_logs.py --peer rldoctor`.
peer:
	test -x .venv-peer/bin/rldoctor && .venv-peer/bin/python -c 'import tensorboard' 2>/dev/null || { $(PYTHON) -m venv .venv-peer && .venv-peer/bin/pip install 'rldoctor[tensorboard]'; }

# The browser test drives Debian's chromium through Playwright (which never downloads a browser of its own).
# Installed with apt-get when missing: as root directly (CI), otherwise through sudo.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium for the browser test (apt-get)"; \
	  if [ "$$(id -u)" = 0 ]; then apt-get update && apt-get install -y chromium; \
	  else sudo apt-get update && sudo apt-get install -y chromium; fi; }

# A live embedded training run streaming into $(DEMO_DB), and the dashboard showing it (Ctrl-C stops both;
# the run saves a checkpoint). When that store is new and sample_runs/ exists, its logs are imported first, the
# recorded runs before the twins restarted from them (so each twin is linked to its parent).
demo: install
	@if [ -d sample_runs ] && [ ! -e '$(DEMO_DB)' ]; then \
	  $(BIN)/grpo-doctor --db '$(DEMO_DB)' import $$(ls sample_runs/*.jsonl | grep -v -- -fix) \
	    && $(BIN)/grpo-doctor --db '$(DEMO_DB)' import sample_runs/*-fix*.jsonl; \
	fi
	$(BIN)/grpo-doctor --db '$(DEMO_DB)' demo --host '$(DEMO_HOST)' --port '$(DEMO_PORT)'
