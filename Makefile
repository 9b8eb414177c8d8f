# The two commands a newcomer types: `make demo` and `make test`.
# make test runs the suite on two pytest-xdist workers (one test file per worker at
# a time: session fixtures such as the converted zoo stay within one process).
# Both create .venv (Python 3.10, pinned set from constraints.txt) on first use.
SHELL := /bin/bash
VENV := .venv
VPY := $(VENV)/bin/python
# Re-install when the dependency declarations change.
STAMP := $(VENV)/.installed-$(shell cat setup.py constraints.txt | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

.PHONY: demo test lint venv clean

demo: $(STAMP)
	$(VENV)/bin/tfx-bridge demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VPY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .

venv: $(STAMP)

$(STAMP): setup.py constraints.txt
	@set -e; \
	py=""; \
	for cand in python3.10 "$$(command -v pyenv >/dev/null && echo $$(pyenv root)/versions/3.10*/bin/python3.10 | tr ' ' '\n' | tail -1)"; do \
	  if [ -n "$$cand" ] && "$$cand" -c 'import sys; assert sys.version_info[:2] == (3, 10)' 2>/dev/null; then py="$$cand"; break; fi; \
	done; \
	if [ -z "$$py" ]; then echo "tfx-bridge needs Python 3.10 (TFX 1.16 wheels): install it (e.g. 'pyenv install 3.10') and retry." >&2; exit 2; fi; \
	if [ ! -x $(VPY) ]; then echo "Creating $(VENV) with $$py"; "$$py" -m venv $(VENV); fi; \
	$(VPY) -m pip install -q --upgrade "pip<25" "setuptools>=69,<76" wheel; \
	$(VPY) -m pip install -c constraints.txt -e ".[onnx,kfp,dev,zoo,s3]"; \
	rm -f $(VENV)/.installed-*; touch $@

clean:
	rm -rf $(VENV) build *.egg-info
