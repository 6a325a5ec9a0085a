# make demo  - set up and start the example project (SQLite): admin + scheduler
# make test  - set up and run the test suite on SQLite, then PostgreSQL and MariaDB if they answer
# make test FULL=1 - the CI matrix: 3 Django versions x 3 databases, lint, docs (through tox)

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed


.PHONY: test demo lint docs bench clean

$(STAMP): pyproject.toml requirements-dev.txt requirements-lint.txt requirements-docs.txt scripts/bootstrap.py
	$(PYTHON) scripts/bootstrap.py $(VENV)
	@touch $(STAMP)

test: $(STAMP)
	$(VPY) scripts/testmatrix.py $(if $(FULL),--full)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy django_posixcron tests

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

demo: $(STAMP)
	$(VPY) example_project/demo.py $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .tox docs/_build .test-db*.sqlite3* test-artifacts
