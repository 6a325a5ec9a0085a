# make demo  - set up and start the example project (SQLite): admin + scheduler
# make test  - set up and run the test suite on SQLite, then PostgreSQL and MariaDB if they answer
# make test FULL=1 - the CI matrix: 3 Django versions x 3 databases, lint, docs (through tox)

PYTHON ?= python3
VENV ?= .venv
VPY := $(VENV)/bin/python

# One stamp per set of packages, so that `make demo` installs only what the example project
# needs (80 MB of the 500) and a `make test` after it still installs everything.
STAMP := $(VENV)/.installed
# The demo's database driver follows the scheme of DATABASE_URL: none for SQLite, the default.
DEMO_DB := $(if $(filter postgres% psql% pgsql% postgis%,$(DATABASE_URL)),postgres,$(if \
	$(filter mysql%,$(DATABASE_URL)),mysql,sqlite))
DEMO_STAMP := $(VENV)/.installed-demo-$(DEMO_DB)
BOOTSTRAP_INPUTS := pyproject.toml requirements-demo.txt scripts/bootstrap.py


.PHONY: test demo lint docs bench clean

$(STAMP): $(BOOTSTRAP_INPUTS) requirements-dev.txt requirements-lint.txt requirements-docs.txt
	$(PYTHON) scripts/bootstrap.py $(VENV)
	@# Everything includes what the demo needs on SQLite and PostgreSQL.
	@touch $(STAMP) $(VENV)/.installed-demo-sqlite $(VENV)/.installed-demo-postgres

$(VENV)/.installed-demo-%: $(BOOTSTRAP_INPUTS)
	$(PYTHON) scripts/bootstrap.py --demo $* $(VENV)
	@touch $@

test: $(STAMP)
	$(VPY) scripts/testmatrix.py $(if $(FULL),--full) $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy django_posixcron tests bench example_project

docs: $(STAMP)
	$(VENV)/bin/sphinx-build -W --keep-going -b html docs docs/_build/html

# demo.py reports how long `make demo` took until the admin answered, installing included.
demo: export DEMO_STARTED := $(shell date +%s)
demo: $(DEMO_STAMP)
	$(VPY) example_project/demo.py $(DEMO_ARGS)

clean:
	rm -rf $(VENV) .tox docs/_build .test-db*.sqlite3* test-artifacts
