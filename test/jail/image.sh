# test/jail/image.sh: sourced by test/jail/run.sh (uses its helpers and
# its $WORK, $USERS, $CGOPT; start_launcher and served_bg of served.sh).
#
# --image DIR (docs/images.md): a sandbox whose system directories are an
# image's instead of the host's, from the attacker's side.  The image here
# is a tiny one made from host files (bash and its libraries, busybox) in
# the layout sandbox-image builds (NAME@DIGEST/root, lock): what is asserted
# is what the jail does with an image, not what Debian puts in one (suite
# images does that with a real one).  No test times anything.

IMGSTORE=$WORK/images
IMG=$IMGSTORE/tiny@$(printf 'tiny' | sha256sum | cut -c1-64)
IMGROOT=$IMG/root
mkdir -p "$IMGROOT/usr/bin" "$IMGROOT/usr/share" "$IMGROOT/etc"
ln -s usr/bin "$IMGROOT/bin"
ln -s usr/lib "$IMGROOT/lib"
ln -s usr/lib64 "$IMGROOT/lib64"
cp /usr/bin/bash "$IMGROOT/usr/bin/bash"
for lib in $(ldd /usr/bin/bash | grep -o '/[^ ]*'); do
	real=$(readlink -f "$lib")
	dst=$IMGROOT/usr${lib#/usr}
	mkdir -p "$(dirname "$dst")"
	cp "$real" "$dst"
done
cp /bin/busybox "$IMGROOT/usr/bin/busybox"
for c in cat ls id stat sleep grep; do ln -s busybox "$IMGROOT/usr/bin/$c"; done
echo "image marker" > "$IMGROOT/usr/share/marker"
echo "ID=tinyimage" > "$IMGROOT/etc/os-release"
# a setuid-root program in the image (sandbox-image strips these; the jail
# must not honour one that is there)
cp "$WORK/probe" "$IMGROOT/usr/bin/suidprobe"
# an absolute symlink out of the image: resolved on the host it would
# show the host's directory (a file the sandbox must never see)
mkdir -p "$WORK/host-ssl/certs"
echo "host certificate secret" > "$WORK/host-ssl/certs/secret.pem"
chmod -R a+rX "$WORK/host-ssl"
ln -s "$WORK/host-ssl" "$IMGROOT/etc/ssl"
: > "$IMG/lock"
chown -R root:root "$IMGSTORE"
chmod 755 "$IMGSTORE" "$IMG" "$IMGROOT"
chmod 644 "$IMG/lock"
chmod 4755 "$IMGROOT/usr/bin/suidprobe"	# after the chown, which clears it

image_checks() {
	local u=$1
	echo "# image: as $u"
	fresh_ws "$u"
	jr "$u" shell 'cat /usr/share/marker; cat /etc/os-release
[ -e /usr/bin/python3 ] && echo HOST-PYTHON
[ -e /usr/lib/postgresql ] && echo HOST-POSTGRES
[ -e /etc/ssl/certs/secret.pem ] && echo HOST-SSL
echo done' --image "$IMG"
	t "$u: image: the sandbox's /usr and /etc files are the image's, none of the host's" \
		'[ $RC = 0 ] && [ "$(v status)" = exited ] && out_has "image marker" && out_has "ID=tinyimage" && out_has done && ! out_has HOST-'
	t "$u: image: a symlink in the image out of it resolves inside it, not on the host" \
		'! out_has HOST-SSL'

	jr "$u" shell 'echo x > /usr/share/x 2>/dev/null && echo WROTE
grep -E " /usr " /proc/self/mountinfo
ls -l /usr/bin/suidprobe; /usr/bin/suidprobe euid' --image "$IMG"
	t "$u: image: mounted read-only, nosuid, nodev; its setuid-root program gains nothing" \
		'[ $RC = 0 ] && ! out_has WROTE && grep -E " /usr " "$WORK/out" | grep -q "ro,nosuid,nodev" && out_has "^-rws" && out_has "euid=1000 uid=1000"'

	chmod o+w "$IMGROOT"
	jr "$u" shell 'echo ran' --image "$IMG"
	chmod o-w "$IMGROOT"
	t "$u: image: a root others may write to is refused (setup error)" \
		'[ $RC = 1 ] && [ "$(v status)" = setup_error ] && ! out_has ran && v setup_error | grep -q "writable by root alone"'

	exec 8<"$IMG/lock"
	flock -x 8
	jr "$u" shell 'echo ran' --image "$IMG"
	flock -u 8
	exec 8<&-
	t "$u: image: a run on an image being removed is refused (setup error)" \
		'[ $RC = 1 ] && ! out_has ran && v setup_error | grep -q "being removed"'

	jr "$u" shell 'echo ran' --image "$WORK/images/none@0123"
	t "$u: image: an image that does not exist is a setup error" \
		'[ $RC = 1 ] && [ "$(v status)" = setup_error ] && ! out_has ran'
}

image_served_checks() {
	local u=$1 other
	echo "# image: served as $u"
	LAUNCHER_EXTRA=(--image "$IMG")
	start_launcher "$u"
	LAUNCHER_EXTRA=()
	fresh_ws "$u"
	printf 'cat /usr/share/marker\n[ -e /usr/bin/python3 ] && echo HOST-PYTHON\necho done\n' > "$WORK/img-code.sh"
	served_bg "$u" img shell "$WORK/img-code.sh" --workspace "$WS" --image "$IMG"
	wait "$BGPID"
	t "$u: image, served: a launcher's sandboxes are built on its image" \
		'grep -q "image marker" "$WORK/img.out" && ! grep -q HOST- "$WORK/img.out" && [ "$(vf "$WORK/img.verdict" status)" = exited ]'
	served_bg "$u" img shell "$WORK/img-code.sh" --workspace "$WS"
	wait "$BGPID"
	other=$WORK/images/other@0123456789ab
	t "$u: image, served: a request for the host's root is refused by an image's launcher" \
		'! grep -q done "$WORK/img.out" && grep -q "serves the image" "$WORK/img.err"'
	served_bg "$u" img shell "$WORK/img-code.sh" --workspace "$WS" --image "$other"
	wait "$BGPID"
	t "$u: image, served: a request for another image is refused" \
		'! grep -q done "$WORK/img.out" && grep -q "serves the image" "$WORK/img.err"'
	kill "$LPID" 2>/dev/null
	launcher_gone
}

for u in $USERS; do
	image_checks "$u"
done
if [ "${JAIL_SKIP_SERVED:-0}" != 1 ]; then
	image_served_checks postgres
fi

# sandbox-image remove: refused while a run holds the image, done after.
fresh_ws postgres
printf 'echo started > /workspace/started\nexec /usr/bin/sleep 60\n' > "$WORK/code"
runuser -u postgres -- "$BIN" --language shell --workspace "$WS" --wall-time 60 --image "$IMG" \
	--verdict-fd 3 "${CGOPT[@]}" < "$WORK/code" > /dev/null 2>&1 3>/dev/null &
IMGRUN=$!
n=0
while [ ! -s "$WS/started" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
SANDBOX_IMAGE_STORE=$IMGSTORE "$ROOT/scripts/sandbox-image" remove tiny > "$WORK/out" 2> "$WORK/err"
RC=$?
t "sandbox-image remove: refused while a sandbox runs on the image, which stays" \
	'[ -s "$WS/started" ] && [ $RC != 0 ] && err_has "in use by a running sandbox" && [ -d "$IMGROOT/usr" ]'
pkill -TERM -P "$IMGRUN" 2>/dev/null
kill -TERM "$IMGRUN" 2>/dev/null
wait "$IMGRUN" 2>/dev/null
SANDBOX_IMAGE_STORE=$IMGSTORE "$ROOT/scripts/sandbox-image" remove tiny > "$WORK/out" 2> "$WORK/err"
RC=$?
t "sandbox-image remove: done once the run is over" '[ $RC = 0 ] && [ ! -e "$IMG" ] && out_has "removed tiny@"'
