# test/tap.sh: a check's count and its line, for every shell suite (sourced,
# not run): test/lib.sh (the SQL suites) and the jail's harnesses
# (test/jail/run.sh, test/warm/run.sh, test/cgroup-v2/checks.sh).
#
#   ok NAME                    count a pass and print it
#   nok NAME [DETAIL...]       count a failure, print it and each detail
#   check NAME EXPECTED ACTUAL ok when they are the same string, else nok
#   tap_summary                the closing "N passed, N failed" (test/run.sh
#                              and test/cgroup-v2/run.sh read this line)
#
# The counts are PASS and FAIL.  Two line styles, chosen by TAP_STYLE before
# the first check (test/run.sh parses both, so each suite keeps its own):
#   numbered (default)  "ok N - NAME", "not ok - NAME", "#   DETAIL"
#   plain               "ok   - TAG NAME", "FAIL - TAG NAME", "       DETAIL"
#                       (TAG: the caller's prefix for a pass of the suite,
#                       e.g. "served "; empty when unset)

PASS=0
FAIL=0
TAP_STYLE=${TAP_STYLE:-numbered}

ok() {
	PASS=$((PASS + 1))
	if [ "$TAP_STYLE" = plain ]; then
		echo "ok   - ${TAG:-}$*"
	else
		echo "ok $PASS - $1"
	fi
}

nok() {
	local l
	FAIL=$((FAIL + 1))
	if [ "$TAP_STYLE" = plain ]; then
		echo "FAIL - ${TAG:-}$1"
		shift
		for l in "$@"; do echo "       $l"; done
	else
		echo "not ok - $1"
		shift
		for l in "$@"; do echo "#   $l"; done
	fi
}

check() {			# name expected actual
	if [ "$2" = "$3" ]; then
		ok "$1"
	elif [ "$TAP_STYLE" = plain ]; then
		nok "$1" "expected [$2]" "got      [$3]"
	else
		nok "$1" "expected [$2], got [$3]"
	fi
}

tap_summary() {
	echo "$PASS passed, $FAIL failed"
}
