# Entry points for people who reach for make; each target delegates to a
# script under scripts/, which is where the work (and its comments) lives.
#
#   make install [PREFIX=/usr/local] [DESTDIR=/tmp/stage]   the gateway as a systemd service
#   make verify-deploy                                      check the deployment files
#   make test                                               the full test suite
#   make demo                                               the dashboard on a simulated home

PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: install verify-deploy test demo

install:
	scripts/install-gateway --prefix "$(PREFIX)" $(if $(DESTDIR),--destdir "$(DESTDIR)")

verify-deploy:
	scripts/verify-deploy

test:
	@if [ -x scripts/test ]; then exec scripts/test; else echo "make test: no scripts/test in this checkout" >&2; exit 1; fi

demo:
	@if [ -x scripts/demo ]; then exec scripts/demo; else echo "make demo: no scripts/demo in this checkout" >&2; exit 1; fi
