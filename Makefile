# `make install PREFIX=/opt/rdcoll` installs the C library (see scripts/install); `make test`
# runs the whole test suite as CI does.
PREFIX ?= /usr/local

.PHONY: install test
install:
	./scripts/install $(PREFIX)

test:
	./scripts/test
