#!/usr/bin/env bash
# The .debs the way a user meets them: a clean Debian 12 root made by debootstrap, the packages
# installed there with `apt-get install ./meshtest_<version>_amd64.deb` (apt resolves Depends;
# also ./meshtrain_<version>_amd64.deb when given), and nothing else at first:
#   1. without torch: `meshtest run` of the built-in matrix (when meshtrain is installed) must
#      meet every expectation or skip with a reason, and examples/pytorch.yaml must exit 0 with
#      every case skipped with its reason;
#   2. then with Debian's python3-torch: examples/pytorch.yaml again, its verdicts compared case
#      by case with a run of the same matrix from the build tree.
# The root sees nothing of this machine but the .debs copied in: no build tree, no checkout.
# Needs root, network to deb.debian.org, about 20 minutes and 2 GB. Not part of CTest
# (harness_install is its cheaper twin there); its reference log is in
# docs/reference-runs/deb-bookworm/.
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
for d in "${debs[@]}"; do
  lintian --fail-on error "$d" > "$work/lintian-$(basename "$d").log" 2>&1 ||
    { cat "$work/lintian-$(basename "$d").log"; fail "lintian reports an error in $(basename "$d")"; }
  echo "debootstrap_test: lintian: no error in $(basename "$d") ($(grep -c '^W:' "$work/lintian-$(basename "$d").log") warnings)"
done
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
apt_install() {
  local start=$SECONDS
  in_root bash -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $*" \
    > "$work/apt.log" 2>&1 || { tail -n 20 "$work/apt.log"; fail "apt-get install $*"; }
  echo "debootstrap_test: apt-get install $* in $((SECONDS - start)) s"
}
apt_install "$in_root_debs"
for d in "${debs[@]}"; do in_root dpkg -s "$(dpkg-deb -f "$d" Package)" | grep -E '^(Package|Version|Depends):'; done
in_root bash -c "command -v meshtest && meshtest --version && ls /usr/share/meshtest && true; \
  ls /usr/share/man/man1/meshtest.1*"
status=0
# 1. No torch in the root.
in_root python3 -c 'import torch' 2>/dev/null && fail "torch is importable before python3-torch is installed"
if in_root bash -c "command -v meshtrain" >/dev/null; then
  in_root bash -c "rm -rf /root/builtin && cd /root && meshtest run --out builtin" > "$work/in-root-builtin.log" 2>&1
  rc=$?
  echo "debootstrap_test: without torch, the built-in matrix: meshtest exit $rc"
  grep -E ' (failed|error|skipped|xfailed) ' "$work/in-root-builtin.log" | grep -v '^\[' | head -n 30
  tail -n 3 "$work/in-root-builtin.log"
  [ "$rc" -eq 0 ] || status=1
fi
in_root bash -c "rm -rf /root/notorch && cd /root && meshtest run /usr/share/meshtest/examples/pytorch.yaml --out notorch" \
  > "$work/in-root-notorch.log" 2>&1
rc=$?
echo "debootstrap_test: without torch, examples/pytorch.yaml: meshtest exit $rc"; tail -n 20 "$work/in-root-notorch.log"
[ "$rc" -eq 0 ] || status=1
# 2. With Debian's torch, against the build tree.
apt_install python3-torch
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
sys.exit(0 if same == len(set(root) | set(tree)) else 1)
PY
same_rc=$?
[ "$status" -eq 0 ] && [ "$same_rc" -eq 0 ]
