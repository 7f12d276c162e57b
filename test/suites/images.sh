#!/usr/bin/env bash
# Sandbox images (issue 30, docs/images.md) end to end, through SQL and the
# real runners: the suite's image is built once with sandbox-image (cached
# in the image store across runs on one machine: --if-missing), held by the
# local runner; a runner host (test/runner_hosts.sh) holds another digest
# of it, and an image of its own.  A chart and a spreadsheet through the
# data stack, a request for an image nobody holds waiting with its reason,
# two runners with different digests never taking each other's runs, what
# of the host an image root does not show, and --check.  T=REGEX runs only
# the matching tests (test/lib.sh).  Ends with "N passed, N failed".
#
# IMAGES_RECIPE: the recipe of the suite's image (default
# test/images/ci.recipe, the data image's Python side; images/data.recipe
# for the full one).  IMAGES_STORE: the local runner's store (default: the
# store sandbox.image_store names, /var/lib/sandbox-images).
# IMAGES_REBUILD=1: t_reproducible builds the recipe a second time and
# compares the digests (minutes: not in make test).
set -uo pipefail

top=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=../lib.sh
. "$top/test/lib.sh"
# shellcheck source=../runner_hosts.sh
. "$top/test/runner_hosts.sh"

RECIPE=${IMAGES_RECIPE:-$top/test/images/ci.recipe}
STORE=${IMAGES_STORE:-/var/lib/sandbox-images}
TOOL=$top/scripts/sandbox-image
IMG=$(awk '$1 == "name" { print $2 }' "$RECIPE")
STB=$RH_DIR/store			# the runner host's store
LEASE=9

cleanup() {
	rh_cleanup
	rm -rf "$STB"
	q -c "UPDATE agent.settings SET value = '30' WHERE key = 'runner_lease_seconds'" >/dev/null 2>&1
}
trap cleanup EXIT

if [ "$(id -u)" != 0 ]; then
	nok "the images suite builds images and makes a runner host: it runs as root"
	finish_suite
fi
wait_for 30 '[ "$(q -c "SELECT running FROM agent.worker_status()")" = t ]'

# ---- the image: built once, then cached -----------------------------------------
echo "# building $IMG from $RECIPE into $STORE (once: --if-missing)"
REF=$(SANDBOX_IMAGE_STORE=$STORE "$TOOL" build "$RECIPE" --if-missing 2>"$RH_DIR.build.log" | tail -n 1)
if [[ ! $REF =~ ^$IMG@[0-9a-f]{64}$ ]]; then
	nok "build the suite's image ($RECIPE)" "$(tail -n 5 "$RH_DIR.build.log")"
	finish_suite
fi
rm -f "$RH_DIR.build.log"
D1=${REF#*@}
setting runner_lease_seconds "$LEASE"
LOCAL=$(q -c "SELECT id FROM agent.runners WHERE name = 'local'")
# the local runner reads its store again at its next heartbeat
wait_for 60 '[ "$(q -c "SELECT count(*) FROM agent.runner_images WHERE runner_id = '"'$LOCAL'"' AND digest = '"'$D1'"'")" = 1 ]' ||
	nok "the local runner reports $IMG@${D1:0:12}"

# The runner host's store: the same image with one more file (another
# digest of the same name), and an image only it holds (solo).  Hard-linked
# copies: no file of the cached image is written.
copy_image() {		# NAME LINE-TO-ADD MARKER → its NAME@DIGEST in $STB
	local name=$1 line=$2 marker=$3 tmp digest
	tmp=$STB/.new
	rm -rf "$tmp"
	mkdir -p "$tmp"
	cp -al "$STORE/$REF/root" "$tmp/root"
	mkdir -p "$tmp/root/usr/share/sandbox-test"
	echo "$marker" > "$tmp/root/usr/share/sandbox-test/marker"
	{ sed "s/^image\tname\t.*/image\tname\t$name/" "$STORE/$REF/manifest"; printf '%s\n' "$line"; } |
		LC_ALL=C sort > "$tmp/manifest"
	cp "$STORE/$REF/warm-modules" "$tmp/warm-modules"
	: > "$tmp/lock"
	chmod 0644 "$tmp/manifest" "$tmp/lock" "$tmp/warm-modules"
	digest=$(sha256sum "$tmp/manifest" | cut -c1-64)
	rm -rf "${STB:?}/$name@$digest"
	mv "$tmp" "$STB/$name@$digest"
	echo "$name@$digest"
}
if ! rh_setup 1 >"$RH_DIR.setup.log" 2>&1; then
	nok "set up the runner host (namespace, veth, TLS, role)" "$(tail -n 5 "$RH_DIR.setup.log")"
	rm -f "$RH_DIR.setup.log"
	finish_suite
fi
rm -f "$RH_DIR.setup.log"
mkdir -p "$STB"
chmod 0755 "$STB"
B_REF=$(copy_image "$IMG" "debian	sandbox-test-variant	b" b)
D2=${B_REF#*@}
SOLO_REF=$(copy_image solo "debian	sandbox-test-solo	1" solo)
D4=${SOLO_REF#*@}

RH_CONF_EXTRA="image_store = '$STB'"
HOST=
# the runner host up, active, and its two images reported
host_up() {
	rh_start 1
	wait_for 30 '[ -n "$(rh_registered 1)" ]'
	HOST=$(rh_registered 1)
	q -c "SELECT agent.drain_runner('$(rh_name 1)', resume => true)" >/dev/null
	wait_for 30 '[ "$(q -c "SELECT count(*) FROM agent.runner_images WHERE runner_id = '"'$HOST'"'")" = 2 ]'
}

# tenant with the image enabled for its org and its agent on it
image_tenant() {
	local T org ws agent conv
	T=$(new_tenant 1000)
	read -r org ws agent conv <<<"$T"
	q -c "SELECT agent.enable_image('$1', org => '$org')" >/dev/null
	tq "$org" "$ws" "SELECT agent.set_agent_image('$agent', '$1', 'alice');" >/dev/null
	echo "$T"
}
# request on an image (the agent's unless named) → "inv approval"
req_image() {		# TENANT LANG CODE [IMAGE]
	local org ws agent conv img=NULL
	read -r org ws agent conv <<<"$1"
	if [ -n "${4:-}" ]; then img="'$4'"; fi
	tq "$org" "$ws" "SELECT invocation_id, approval_id FROM agent.request_execution('$ws', '$agent', NULL, '$2', :'code', 'requester', image => $img);" \
		-F ' ' -v code="$3" | tail -n 1
}

# "Draw a chart of sales by month and give me the spreadsheet": pandas and
# matplotlib on the image, the PNG and the xlsx back as produced files.
t_chart_xlsx() {
	local A org ws agent conv inv appr
	A=$(image_tenant "$IMG")
	read -r org ws agent conv <<<"$A"
	read -r inv appr < <(req_image "$A" python 'import pandas as pd, matplotlib
import matplotlib.pyplot as plt
df = pd.DataFrame({"month": ["jan", "feb", "mar", "apr"], "sales": [120, 80, 200, 50]})
df.plot(x="month", y="sales", kind="bar", title="Sales by month")
plt.savefig("/workspace/chart.png")
df.to_excel("report.xlsx", index=False)
back = pd.read_excel("report.xlsx")
print(matplotlib.get_backend(), int(back.sales.sum()), list(back.columns))')
	check "the card: the image and its short digest, the manifest's interpreter" \
		"$IMG@${D1:0:12}|python $(awk -F'\t' '$1 == "interpreter" && $2 == "python" { print $3 }' "$STORE/$REF/manifest")|$D1" \
		"$(tq "$org" "$ws" "SELECT image || '|' || runtime || '|' || image_digest FROM agent.approval_card('$appr');")"
	approve "$A" "$appr"
	await "$A" "$inv" 120 >/dev/null
	check "the run succeeds on the image: Agg, the spreadsheet read back" \
		"succeeded|agg 450 ['month', 'sales']" "$(field "$inv" state)|$(output "$inv")"
	check "the chart is a produced file, image/png, a PNG" \
		"chart.png|saved|image/png|89504e470d0a1a0a" \
		"$(q -c "SELECT name || '|' || status || '|' || content_type || '|' || encode(substring(content from 1 for 8), 'hex') FROM agent.files WHERE invocation_id = '$inv' AND name = 'chart.png'")"
	check "the spreadsheet is a produced file (xlsx, a zip)" \
		"report.xlsx|saved|application/vnd.openxmlformats-officedocument.spreadsheetml.sheet|504b0304" \
		"$(q -c "SELECT name || '|' || status || '|' || content_type || '|' || encode(substring(content from 1 for 4), 'hex') FROM agent.files WHERE invocation_id = '$inv' AND name = 'report.xlsx'")"
	check "the local runner ran it (it holds the digest)" "$LOCAL" "$(field "$inv" runner_id)"
}

# What an image root shows of the host: nothing.  The same script on the
# host's root (image host) sees what it looks for, so each check can fail.
t_host_not_visible() {
	local A org ws agent conv inv appr script
	A=$(image_tenant "$IMG")
	read -r org ws agent conv <<<"$A"
	script='for p in /usr/lib/postgresql /usr/bin/pg_ctlcluster /etc/postgresql-common /var/lib/sandbox-images \
	/etc/apt/sources.list.d /etc/shadow /usr/bin/qemu-system-x86_64 /usr/bin/clickhouse /opt; do
	[ -e "$p" ] && echo "VISIBLE $p"
done
find /usr /etc -type f -perm /6000 2>/dev/null | head -n 3 | sed "s/^/SETID /"
grep -E " /usr " /proc/self/mountinfo | grep -q "ro,nosuid,nodev" && echo usr-ro-nosuid
echo done'
	read -r inv appr < <(req_image "$A" shell "$script")
	approve "$A" "$appr"
	await "$A" "$inv" 60 >/dev/null
	check "through the image: no host file, no setuid or setgid program, /usr read-only nosuid" \
		"succeeded|usr-ro-nosuid
done" "$(field "$inv" state)|$(output "$inv")"
	read -r inv appr < <(req_image "$A" shell "$script" host)
	approve "$A" "$appr"
	await "$A" "$inv" 60 >/dev/null
	check "(the same script on the host's root sees the host's postgresql and setuid programs)" \
		"succeeded|yes|yes" \
		"$(field "$inv" state)|$(output "$inv" | grep -q '^VISIBLE /usr/lib/postgresql$' && echo yes)|$(output "$inv" | grep -q '^SETID ' && echo yes)"
}

# Two runners holding different digests of one image: each run goes to the
# runner holding the digest it was bound to, never the other.
t_no_swap() {
	local A org ws agent conv inv appr i runs=() want got
	host_up
	A=$(image_tenant "$IMG")
	read -r org ws agent conv <<<"$A"
	# while the host drains, requests are bound to what the local runner holds
	q -c "SELECT agent.drain_runner('$(rh_name 1)')" >/dev/null
	for i in 1 2 3; do
		read -r inv appr < <(req_image "$A" python 'import os; print(os.path.exists("/usr/share/sandbox-test/marker"))')
		runs+=("$inv:$appr")
	done
	q -c "SELECT agent.drain_runner('$(rh_name 1)', resume => true)" >/dev/null
	for i in 1 2 3; do
		read -r inv appr < <(req_image "$A" python 'import os; print(os.path.exists("/usr/share/sandbox-test/marker"))')
		runs+=("$inv:$appr")
	done
	check "three runs bound to each digest" "${D1:0:12}:3|${D2:0:12}:3" \
		"$(q -c "SELECT string_agg(left(image_digest, 12) || ':' || n, '|' ORDER BY image_digest = '$D2') FROM (SELECT image_digest, count(*) AS n FROM agent.invocations WHERE org_id = '$org' GROUP BY 1) x")"
	for r in "${runs[@]}"; do approve "$A" "${r#*:}"; done
	for r in "${runs[@]}"; do await "$A" "${r%%:*}" 120 >/dev/null; done
	want= got=
	for r in "${runs[@]}"; do
		inv=${r%%:*}
		want+="$(q -c "SELECT CASE image_digest WHEN '$D1' THEN '$LOCAL' ELSE '$HOST' END FROM agent.invocations WHERE id = '$inv'") "
		got+="$(field "$inv" runner_id) "
	done
	check "each run ran on the runner holding its digest" "$want" "$got"
	check "and saw that digest's files (the host's copy has the marker)" "False False False True True True" \
		"$(for r in "${runs[@]}"; do output "${r%%:*}" | tr -d '\n'; printf ' '; done | sed 's/ $//')"
}

# An image no runner holds: the request is bound to it, the run waits with
# its reason, and runs once a runner holds the image again.
t_waits_unheld() {
	local A org ws agent conv inv appr
	host_up
	A=$(image_tenant solo)
	read -r org ws agent conv <<<"$A"
	read -r inv appr < <(req_image "$A" python 'print(open("/usr/share/sandbox-test/marker").read().strip())')
	check "the request is bound to the digest the host holds" "solo|$D4" "$(field "$inv" "image_name || '|' || image_digest")"
	SANDBOX_IMAGE_STORE=$STB "$TOOL" remove solo >/dev/null
	wait_for 30 '[ "$(q -c "SELECT count(*) FROM agent.runner_images WHERE runner_id = '"'$HOST'"' AND name = '"'solo'"'")" = 0 ]'
	approve "$A" "$appr"
	wait_for 30 '[ "$(q -c "SELECT waiting_for FROM agent.queue_status() WHERE invocation_id = '"'$inv'"'")" = image_not_held ]'
	check "approved, it waits: no live runner holds the image" \
		"approved|image_not_held|no live runner holds the image solo@${D4:0:12}" \
		"$(field "$inv" state)|$(q -c "SELECT waiting_for || '|' || detail FROM agent.queue_status() WHERE invocation_id = '$inv'")"
	copy_image solo "debian	sandbox-test-solo	1" solo >/dev/null
	check "the host holds it again" "succeeded|solo|$HOST" \
		"$(await "$A" "$inv" 120)|$(output "$inv")|$(field "$inv" runner_id)"
}

# The cache, and what --check says of the runner host's images.
t_cache_and_check() {
	local again out
	again=$(SANDBOX_IMAGE_STORE=$STORE "$TOOL" build "$RECIPE" --if-missing 2>&1)
	check "a second build of the recipe builds nothing: the cached image" "$REF" "$again"
	check "the digest is the manifest's sha256" "$D1" "$(sha256sum "$STORE/$REF/manifest" | cut -c1-64)"
	check "sandbox-image list shows it" 1 \
		"$(SANDBOX_IMAGE_STORE=$STORE "$TOOL" list | awk -v n="$IMG" -v d="${D1:0:12}" '$1 == n && $2 == d' | wc -l)"
	rh_conf 1 2
	out=$(rh_in 1 "$RH_RUNNER" --config "$RH_DIR/h1/runner.conf" --check 2>&1)
	check "sandbox-runner --check runs a payload on each of its images" "2" \
		"$(printf '%s\n' "$out" | grep -cE "^ok +image ($IMG@${D2:0:12}|solo@${D4:0:12}): .*python 3\.[0-9.]+; a python payload ran")"
}

# Two builds of one recipe on one day: one digest.  A second build takes
# minutes: only with IMAGES_REBUILD=1 (into a store of its own, sharing the
# downloaded packages).
t_reproducible() {
	local st again
	if [ "${IMAGES_REBUILD:-0}" != 1 ]; then
		echo "# (skipped: IMAGES_REBUILD=1 builds the recipe a second time)"
		return
	fi
	st=$(mktemp -d /tmp/sandbox_images_rebuild.XXXXXX)
	chmod 0755 "$st"
	ln -s "$STORE/.debs" "$st/.debs"
	again=$(SANDBOX_IMAGE_STORE=$st "$TOOL" build "$RECIPE" 2>/dev/null | tail -n 1)
	rm -rf "$st"
	check "a second build of the recipe has the same digest" "$REF" "$again"
}

run_tests t_chart_xlsx t_host_not_visible t_no_swap t_waits_unheld t_cache_and_check t_reproducible
check_invariants
finish_suite
