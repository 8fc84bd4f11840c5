# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test bench clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	@echo "make: creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "make: installing daskmicro and its dependencies into $(VENV) (a few minutes on a fresh machine with an empty pip cache) …"
	@# pip's own output goes to a log, shown only if the install fails
	@$(PY) -m pip install --upgrade pip > $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@$(PY) -m pip install --progress-bar off -e ".[test]" >> $(VENV)/install.log 2>&1 || { cat $(VENV)/install.log; exit 1; }
	@echo "make: installed (pip's log: $(VENV)/install.log); the first run compiles the kernels once (about half a minute), later runs load them"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/daskmicro demo --output demo-output

# Test files run in TEST_JOBS processes (pytest-xdist; a file's tests stay in one process, the slowest
# files first as tests/conftest.py orders them, and each
# process starts the shared clusters of tests/conftest.py at most once); TEST_JOBS=0 runs everything
# in this process.
TEST_JOBS ?= 2

# The package is installed in place (pip does not byte-compile it): compile it once here, so that the
# suite's many processes (CLI runs, Dask workers and schedulers) load it instead of compiling it each.
test: $(STAMP)
	$(PY) -m compileall -q daskmicro
	$(PY) -m pytest -q --durations=15 $(if $(filter 0,$(TEST_JOBS)),,-n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder)

bench: $(STAMP)
	$(PY) benchmarks/bench_mdav.py
	$(PY) benchmarks/bench_pca_mdav.py

clean:
	rm -rf $(VENV) demo-output .pytest_cache
