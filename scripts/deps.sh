#!/usr/bin/env bash
# Installs what `make demo` and `make test` need on a Debian 12 machine and
# prepares the host (delegated cgroups for the jail).  Idempotent: packages
# already present are not touched, and apt-get update runs only when
# something is missing.  Runs as root, or through sudo otherwise.
set -euo pipefail

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	SUDO=sudo
fi

PACKAGES=(
	build-essential
	postgresql-15
	postgresql-server-dev-15
	libpq-dev
	postgresql-15-cron
	postgresql-15-pgtap
	postgresql-15-plpgsql-check
	libtap-parser-sourcehandler-pgtap-perl
	libseccomp-dev
	libcap-dev
	libcurl4-openssl-dev
	libssl-dev
	# secrets (docs/secrets.md): sealed boxes (sandbox-runner, sandbox-secret)
	libsodium-dev
	bubblewrap
	python3
	python3-numpy
	python3-pandas
	python3-requests
	# examples/python (suite examples) and clients/python (suite clients):
	# psycopg 3; the clients suite checks the package with mypy and
	# installs it into a venv
	python3-psycopg
	python3-mypy
	python3-venv
	# the approver's page (suite clients) in a headless browser
	chromium
	# the gvisor isolation class (docs/security.md; the jail and gvisor
	# suites): Debian's gVisor
	runsc
	bash
	procps
	util-linux
	# the runners suite's hosts (test/runner_hosts.sh): network namespaces
	# and veths, and a test CA
	iproute2
	openssl
	clickhouse-server
	clickhouse-client
	# the cgroup-v2 suite's guest (test/cgroup-v2): the emulator, the
	# initramfs's busybox, and strace for its CLONE_INTO_CGROUP check
	qemu-system-x86
	busybox-static
	strace
	# the egress suite's fake internet (test/egress): network namespaces,
	# its test CA, and the clients it runs inside sandboxes
	iproute2
	openssl
	curl
	wget
	# sandbox images (scripts/sandbox-image, docs/images.md): debootstrap
	# builds an image's root from Debian's packages
	debootstrap
)

missing=()
for p in "${PACKAGES[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
# Node.js: any /usr/bin/node will do (Debian's nodejs or a vendor build);
# npm installs node-postgres for examples/node.
if [ ! -x /usr/bin/node ]; then
	missing+=(nodejs)
fi
if ! command -v npm >/dev/null; then
	missing+=(npm)
fi

if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -q
	$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Debian starts a default cluster on install; the project uses throwaway
# clusters of its own and never needs it.
if command -v pg_lsclusters >/dev/null && pg_lsclusters -h 2>/dev/null | grep -q '^15 *main .* online'; then
	$SUDO pg_ctlcluster 15 main stop || true
fi

here=$(cd "$(dirname "$0")" && pwd)

# node-postgres for examples/node (suite examples), at the versions its
# package-lock.json names.
if [ ! -d "$here/../examples/node/node_modules/pg" ]; then
	(cd "$here/../examples/node" && npm ci --no-audit --no-fund --loglevel=error)
fi

# clients/node (suite clients): node-postgres, and for its tests TypeScript
# (the type check) and playwright-core (drives Debian's chromium), at the
# versions its package-lock.json names.
if [ ! -d "$here/../clients/node/node_modules/pg" ] || [ ! -d "$here/../clients/node/node_modules/playwright-core" ]; then
	(cd "$here/../clients/node" && npm ci --no-audit --no-fund --loglevel=error)
fi

# The cgroup-v2 guest's kernel: Debian's, unpacked into a cache (not
# installed on this host).
$SUDO "$here/guest-kernel.sh"

# Delegated cgroups so the jail started by postgres gets real limits.
if [ -x "$here/jail-host-setup.sh" ]; then
	$SUDO "$here/jail-host-setup.sh" postgres
fi
