# sandbox_ext: PGXS build of the extension, plus the standalone jail and
# the two commands of the README (`make demo`, `make test`).
#
# The install script is assembled from sql/src/*.sql (one file per
# concern, applied in name order) into sql/sandbox_ext--$(EXTVERSION).sql.
# The upgrade script from the previous release is assembled too: its
# hand-written head sql/upgrade/$(PREVVERSION)--$(EXTVERSION).sql (tables,
# columns, indexes, rows: state) followed by the definitions of sql/src
# replayed by scripts/sql-replay.pl (functions, views, triggers, policies,
# grants, comments), then the optional hand-written tail
# sql/upgrade/$(PREVVERSION)--$(EXTVERSION).post.sql (state that needs the
# new definitions: constraint triggers, a migration calling a new function).  Released versions' scripts are committed files in
# sql/ and never change (docs/operations.md, "Releases and upgrades").

EXTENSION = sandbox_ext
EXTVERSION = 0.3.0
PREVVERSION = 0.2.0
MODULE_big = sandbox_ext
OBJS = src/sandbox_ext.o src/shmem.o src/xact.o \
	src/supervisor.o src/local_runner.o src/api.o \
	src/export_worker.o src/export_stream.o src/export_copy.o src/export_state.o src/pgoutput.o src/chclient.o \
	src/anchor.o src/guards.o src/digest.o src/person_key.o src/audit.o src/refusals.o src/jail_wire.o

DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql sql/$(EXTENSION)--$(PREVVERSION)--$(EXTVERSION).sql
# The frozen scripts of released versions (install and upgrade).
DATA = $(filter-out $(DATA_built),$(wildcard sql/$(EXTENSION)--*.sql))
DOCS = $(wildcard docs/*.md)

# pg_regress inputs live in test/regress/sql with their expected output in
# test/regress/expected, the isolation specs in test/isolation.  test/run.sh
# drives them (and the other suites) against a throwaway cluster;
# `make installcheck` runs these two against the server of PGHOST/PGPORT in a
# database of their own (contrib_regression, isolation_regression), and that
# server must preload sandbox_ext (shared_preload_libraries).
REGRESS = $(sort $(basename $(notdir $(wildcard test/regress/sql/*.sql))))
REGRESS_OPTS = --inputdir=test/regress --load-extension=sandbox_ext
ISOLATION = $(sort $(basename $(notdir $(wildcard test/isolation/specs/*.spec))))
ISOLATION_OPTS = --inputdir=test/isolation --load-extension=sandbox_ext

PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config
PG_CPPFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-sign-compare \
	-Wno-missing-field-initializers
SHLIB_LINK =
SHLIB_LINK += -lcurl -lcrypto

PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)
ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
bindir := $(shell $(PG_CONFIG) --bindir)
endif

SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

# PGXS tracks no header dependencies: the shared-memory struct lives in a
# header, and an object built against an older layout corrupts it.
$(OBJS) $(OBJS:.o=.bc): $(wildcard src/*.h) src/runner/local_link.h

sql/$(EXTENSION)--$(EXTVERSION).sql: $(sort $(wildcard sql/src/*.sql)) FORCE
	cat $(filter %.sql,$^) > $@.tmp && mv $@.tmp $@

# Both scripts are rebuilt every time (it takes milliseconds): a part
# removed from sql/src or sql/upgrade would otherwise leave a stale script
# that still has it.
UPGRADE_POST = $(wildcard sql/upgrade/$(PREVVERSION)--$(EXTVERSION).post.sql)
sql/$(EXTENSION)--$(PREVVERSION)--$(EXTVERSION).sql: sql/upgrade/$(PREVVERSION)--$(EXTVERSION).sql \
		$(sort $(wildcard sql/src/*.sql)) $(UPGRADE_POST) scripts/sql-replay.pl FORCE
	{ cat sql/upgrade/$(PREVVERSION)--$(EXTVERSION).sql && \
	  echo && echo '-- ---- replayed definitions of sql/src (scripts/sql-replay.pl) ----' && \
	  perl scripts/sql-replay.pl $(sort $(wildcard sql/src/*.sql)) && \
	  { [ -z "$(UPGRADE_POST)" ] || { echo '-- ---- $(UPGRADE_POST) ----' && cat $(UPGRADE_POST); }; }; } > $@.tmp && mv $@.tmp $@

.PHONY: jail jail-install runner runner-install deps demo test build-all FORCE
FORCE:
# The jail lives in src/jail with its own Makefile (it never sees postgres.h).
jail:
	@if [ -f src/jail/Makefile ]; then $(MAKE) -C src/jail; fi
	$(MAKE) -C src/egress

# sandbox-runner (src/runner, frontend C: libpq, libpgcommon) runs every
# sandbox; the supervisor starts it next to the server as the local runner.
runner:
	$(MAKE) -C src/runner PG_CONFIG=$(PG_CONFIG)

all: jail runner

install: jail-install runner-install
jail-install: jail
	install -d '$(DESTDIR)$(bindir)'
	@if [ -f src/jail/sandbox-jail ]; then \
		install -m 0755 src/jail/sandbox-jail '$(DESTDIR)$(bindir)/sandbox-jail'; fi
	@if [ -f src/jail/sandbox-gvisor-init ]; then \
		install -m 0755 src/jail/sandbox-gvisor-init '$(DESTDIR)$(bindir)/sandbox-gvisor-init'; fi
	install -m 0755 src/egress/sandbox-egress '$(DESTDIR)$(bindir)/sandbox-egress'
	# the operator's image tool (docs/images.md)
	install -m 0755 scripts/sandbox-image '$(DESTDIR)$(bindir)/sandbox-image'
runner-install: runner
	install -d '$(DESTDIR)$(bindir)'
	install -m 0755 src/runner/sandbox-runner '$(DESTDIR)$(bindir)/sandbox-runner'
	install -m 0755 src/runner/sandbox-secret '$(DESTDIR)$(bindir)/sandbox-secret'
	# the ExecStart step of src/runner/sandbox-runner.service (--enter-cgroup)
	install -m 0755 scripts/jail-host-setup.sh '$(DESTDIR)$(bindir)/sandbox-jail-host-setup'

clean: jail-clean runner-clean
jail-clean:
	@if [ -f src/jail/Makefile ]; then $(MAKE) -C src/jail clean; fi
	$(MAKE) -C src/egress clean
runner-clean:
	$(MAKE) -C src/runner clean

deps:
	scripts/deps.sh

# The build runs as the invoking user; only the install needs root.
build-all: deps
	$(MAKE) all
	$(SUDO) $(MAKE) install

demo: build-all
	scripts/demo.sh

test: build-all
	test/run.sh
