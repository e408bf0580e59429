#!/usr/bin/env bash
# meshtest as a user installs it, from this checkout:
#  1. the `harness` preset (no LibTorch, no meshtrain) configures and builds; ldd shows no torch;
#  2. cpack makes meshtest_<version>_amd64.deb; its Depends come from dpkg-shlibdeps; it has a
#     gzipped man page, a copyright file, a changelog and an extended description, and lintian
#     reports no error;
#  3. `cmake --install` into a fresh prefix, and from that prefix alone (a clean environment: no
#     build tree on PATH, another working directory) examples/pytorch.yaml runs: its PyTorch cases
#     judged as in the tree, the case that needs meshtrain skipped with how to point at one, and
#     a matrix that is all meshtrain refused with that message (exit 2); the built-in matrix
#     reads its goldens, scripts and reference program from the prefix, not the checkout.
# Exit 77 (skipped) where no Python imports torch (examples/pytorch/python.sh). Usage: harness_install_test.sh SOURCE_DIR WORK_DIR
set -uo pipefail
src=$(cd "$1" && pwd) work=$2
fail() { echo "harness_install: FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work" && work=$(cd "$work" && pwd)
cd "$src"

start=$SECONDS
cmake --preset harness > "$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "cmake --preset harness"; }
cmake --build --preset harness > "$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; fail "cmake --build --preset harness"; }
echo "harness_install: configure + build of the harness preset: $((SECONDS - start)) s"
binary=build/harness/meshtest
# The names only: a load address such as 0x00007ff7198c1000 holds "c10" (this test failed so once).
! ldd "$binary" | awk '{print $1}' | grep -i -E 'torch|c10|gloo' || fail "the harness build links LibTorch"
version=$("$binary" --version) || fail "meshtest --version"
echo "harness_install: $version; $(ldd "$binary" | wc -l) shared libraries, none of LibTorch"

cpack --preset harness -B "$work/packages" > "$work/cpack.log" 2>&1 || { cat "$work/cpack.log"; fail "cpack --preset harness"; }
deb=$(ls "$work"/packages/meshtest_*_amd64.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { cat "$work/cpack.log"; fail "no meshtest_<version>_amd64.deb"; }
depends=$(dpkg-deb -f "$deb" Depends)
echo "harness_install: $(basename "$deb"), $(du -k "$deb" | cut -f1) KiB, Depends: $depends"
[[ $depends == *libyaml-cpp* && $depends != *torch* ]] || fail "Depends should name yaml-cpp and no torch: $depends"
contents=$(dpkg-deb -c "$deb")
grep -q './usr/bin/meshtest$' <<< "$contents" || fail "the package has no /usr/bin/meshtest"
grep -q './usr/share/man/man1/meshtest.1.gz$' <<< "$contents" || fail "the package has no gzipped man page"
grep -q './usr/share/doc/meshtest/copyright$' <<< "$contents" || fail "the package has no copyright file"
grep -q './usr/share/doc/meshtest/changelog.gz$' <<< "$contents" || fail "the package has no changelog.gz"
[ "$(dpkg-deb -f "$deb" Description | wc -l)" -gt 1 ] || fail "the package's Description has no extended text"
# Debian's package checker: no error (warnings are printed).
if command -v lintian > /dev/null; then
  lintian --fail-on error "$deb" > "$work/lintian.log" 2>&1 || { cat "$work/lintian.log"; fail "lintian reports errors"; }
  echo "harness_install: lintian: $(grep -c '^[EW]: ' "$work/lintian.log") error(s) and warning(s), no error"
else
  echo "harness_install: NOTICE: no lintian here (ci/setup-deps.sh installs it); the package is not linted"
fi
grep -q './usr/share/meshtest/examples/pytorch.yaml$' <<< "$contents" || fail "the package has no examples"

prefix=$work/prefix
cmake --install build/harness --prefix "$prefix" --component meshtest > "$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install"; }
# The built-in matrix from the prefix reads its goldens, scripts and reference program there, not
# in this checkout: share/meshtest mirrors the checkout's folders.
shown=$(cd / && "$prefix/bin/meshtest" show cpu/reference 2>&1) || { echo "$shown"; fail "meshtest show cpu/reference from the prefix"; }
for f in tests/reference/llama_reference.py examples/pytorch/python.sh trainer/data/corpus.txt; do
  grep -q "$prefix/share/meshtest/test_matrix/../$f" <<< "$shown" || { echo "$shown"; fail "the built-in matrix does not use the prefix's $f"; }
  [ -f "$prefix/share/meshtest/$f" ] || fail "the prefix has no share/meshtest/$f"
done
! grep -q -E "$src/(test_matrix|examples|tests|trainer)/" <<< "$shown" ||
  { echo "$shown"; fail "the installed built-in matrix names the checkout's files ($src)"; }
[ -f "$prefix/share/meshtest/test_matrix/golden/tiny_1d.loss.txt" ] || fail "the prefix has no golden files"
# meshtest_sim and every source it compiles on first use (sitecustomize.py's SOURCES and HEADERS),
# where sim/python/sitecustomize.py looks.
sim_files=$(python3 -c 'import ast, sys
for node in ast.parse(open(sys.argv[1]).read()).body:
    if isinstance(node, ast.Assign) and node.targets[0].id in ("SOURCES", "HEADERS"):
        print(" ".join(ast.literal_eval(node.value)))' "$src/sim/python/sitecustomize.py")
[ -n "$sim_files" ] || fail "no SOURCES or HEADERS read from sim/python/sitecustomize.py"
for f in sim/python/sitecustomize.py $sim_files; do
  [ -f "$prefix/share/meshtest/$f" ] || fail "the prefix has no share/meshtest/$f (meshtest_sim)"
done
# Every relative link of the installed docs leads to an installed file.
broken=$(python3 - "$prefix/share/doc/meshtest" << 'PY'
import os, re, sys
root = sys.argv[1]
for d, _, files in os.walk(root):
    for f in files:
        if not f.endswith(".md"):
            continue
        text = open(os.path.join(d, f), encoding="utf-8").read()
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            path = target.split("#")[0]
            if path and "://" not in path and not path.startswith("mailto:") and not os.path.exists(os.path.join(d, path)):
                print("%s -> %s" % (os.path.relpath(os.path.join(d, f), root), target))
PY
)
[ -z "$broken" ] || { echo "$broken"; fail "installed docs link to files that are not installed"; }

if ! bash "$prefix/share/meshtest/examples/pytorch/python.sh" -c 'import torch' 2>/dev/null; then
  echo "harness_install: no Python here imports torch; the example run is skipped"
  exit 77
fi
run_dir=$(mktemp -d)
cd "$run_dir"
# A clean environment: the system's PATH plus the folder of the Python that imports torch (the
# user's own, e.g. a virtualenv), nothing of the build tree.
python_dir=$(dirname "$(bash "$prefix/share/meshtest/examples/pytorch/python.sh" -c 'import sys; print(sys.executable)')")
clean_env=(env -i HOME="$HOME" PATH="$python_dir:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 CI=true)
"${clean_env[@]}" "$prefix/bin/meshtest" run "$prefix/share/meshtest/examples/pytorch.yaml" --out out \
  --id pytorch/none --id pytorch/canary_seed --id pytorch/legacy_log --id pytorch/keys_vs_meshtrain > run.log 2>&1
rc=$?
cat run.log
[ "$rc" = 0 ] || fail "the example from the prefix exited $rc"
grep -q "passed    pytorch/none" run.log || fail "pytorch/none did not pass"
grep -q "passed    pytorch/canary_seed" run.log || fail "the canary was not caught"
grep -q "skipped   pytorch/keys_vs_meshtrain.*needs meshtrain.*--meshtrain PATH" run.log ||
  fail "keys_vs_meshtrain should be skipped saying how to point at meshtrain"
"${clean_env[@]}" "$prefix/bin/meshtest" run --out out2 > default.log 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "needs meshtrain" default.log || { cat default.log; fail "the built-in (meshtrain) matrix should stop with exit 2 naming meshtrain, got $rc"; }
echo "harness_install: from $prefix alone: the example's cases as in the tree; meshtrain's absence named"
