#!/usr/bin/env bash
# The .debs the way a user meets them: a clean Debian 12 root made by debootstrap, the packages
# installed there with `apt-get install ./meshtest_<version>_amd64.deb` (apt resolves Depends;
# also ./meshtrain_<version>_amd64.deb when given) and
# Debian's python3-torch, then `meshtest run /usr/share/meshtest/examples/pytorch.yaml` inside
# that root. Its verdicts are compared case by case with a run of the same matrix from the build
# tree. The root sees nothing of this machine but the .debs copied in: no build tree, no checkout.
# Needs root, network to deb.debian.org, about 10 minutes and 2 GB. Not part of CTest
# (harness_install is its cheaper twin there).
# Usage: tools/deb/debootstrap_test.sh WORK_DIR IN_TREE_MESHTEST DEB...
set -uo pipefail
work=$1 meshtest=$(realpath "$2")
shift 2
debs=()
for d in "$@"; do debs+=("$(realpath "$d")"); done
repo=$(cd "$(dirname "$0")/../.." && pwd)
root=$work/root
fail() { echo "debootstrap_test: FAIL: $*"; exit 1; }
mkdir -p "$work"
if [ ! -x "$root/usr/bin/apt-get" ]; then
  start=$SECONDS
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian > "$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log"; fail debootstrap; }
  echo "debootstrap_test: a clean bookworm root in $((SECONDS - start)) s"
fi
cleanup() { umount "$root/proc" "$root/dev/shm" 2>/dev/null; }
trap cleanup EXIT
mount -t proc proc "$root/proc" && mount -t tmpfs tmpfs "$root/dev/shm" || fail "mounting /proc and /dev/shm in the root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root_debs=""
for d in "${debs[@]}"; do cp "$d" "$root/tmp/"; in_root_debs+=" /tmp/$(basename "$d")"; done
in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 CI=true "$@"; }
in_root bash -c "test ! -e '$repo' && test ! -e '$(dirname "$meshtest")'" || fail "the build tree is visible in the root"
start=$SECONDS
in_root bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  $in_root_debs python3-torch" > "$work/apt.log" 2>&1 || { tail -n 20 "$work/apt.log"; fail "apt-get install"; }
echo "debootstrap_test: apt-get install$in_root_debs python3-torch in $((SECONDS - start)) s"
for d in "${debs[@]}"; do in_root dpkg -s "$(dpkg-deb -f "$d" Package)" | grep -E '^(Package|Version|Depends):'; done
in_root bash -c "command -v meshtest && meshtest --version && ls /usr/share/meshtest && true; \
  ls /usr/share/man/man1/meshtest.1*"
in_root bash -c "rm -rf /root/run && cd /root && meshtest run /usr/share/meshtest/examples/pytorch.yaml --out run" \
  > "$work/in-root.log" 2>&1
echo "debootstrap_test: in the root, meshtest exit $?"; tail -n 22 "$work/in-root.log"
cp "$root/root/run/summary.json" "$work/in-root-summary.json"
(cd "$repo" && "$meshtest" run examples/pytorch.yaml --out "$work/in-tree" > "$work/in-tree.log" 2>&1)
echo "debootstrap_test: in the tree, meshtest exit $?"
python3 - "$work/in-root-summary.json" "$work/in-tree/summary.json" <<'PY'
import json, sys
def verdicts(p):
    return {c["id"]: c.get("status") for c in json.load(open(p))["cases"]}
root, tree = verdicts(sys.argv[1]), verdicts(sys.argv[2])
for case in sorted(set(root) | set(tree)):
    mark = "" if root.get(case) == tree.get(case) else "   <- differs"
    print(f"  {case:34} root {root.get(case)!s:9} tree {tree.get(case)!s:9}{mark}")
same = sum(root.get(c) == tree.get(c) for c in set(root) | set(tree))
print(f"debootstrap_test: {same} of {len(set(root) | set(tree))} verdicts the same")
PY
