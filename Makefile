# Set-up in two commands: `make demo` and `make test`. Everything is installed by this file.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: install demo test lint bench postgres-server clean

# An editable install compiles nothing: compiling the sources once spares every `voda`
# process about 0.1 CPU-s of start-up where the environment forbids writing them on import.
$(STAMP): pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,train]'
	$(PY) -m compileall -q voda >/dev/null
	@touch $(STAMP)

install: $(STAMP)

# PostgreSQL binaries, prometheus and promtool, and Chromium from Debian's packages; the
# tests start a throwaway PostgreSQL server and Prometheus themselves and drive Chromium
# with Playwright.
postgres-server:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || \
		{ echo "installing PostgreSQL (Debian package)"; \
		  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
		  || echo "could not install PostgreSQL: the PostgreSQL tests will fail"; }
	@command -v kubectl >/dev/null 2>&1 || \
		echo "kubectl not found: the fake API server's kubectl conformance tests and the deploy/ tests will fail"
	@{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || \
		{ echo "installing promtool and prometheus (Debian package prometheus)"; \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
		  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null) \
		  || echo "could not install prometheus: the metrics and monitoring tests will fail"; }
	@command -v chromium >/dev/null 2>&1 || \
		{ echo "installing Chromium (Debian package chromium) for the dashboard tests"; \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null \
		  || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null) \
		  || echo "could not install Chromium: the dashboard and report tests will fail"; }

demo: $(STAMP)
	$(VENV)/bin/voda demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

test: $(STAMP) postgres-server lint
	$(PY) -m pytest -q -p no:cacheprovider -rfE --durations=25

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
