#!/usr/bin/env bash
# Makes the git-ignored folders ci/gpu-torchtitan.sh carries to the offline GPU machine to run the
# real torchtitan (pytorch/torchtitan e51e914, 2026-03-06; docs/building.md):
#   .deps/python            torchtitan and the pure-Python packages the GPU image (torch 2.11, Python
#                           3.12, transformers) lacks, as source: tyro, typeguard, docstring_parser,
#                           shtab, torchdata, datasets, dill, multiprocess; MANIFEST.txt names each.
#   .deps/python-fallback   typing_extensions 4.15 (typeguard 4.5 needs >= 4.14; ci/gpu-torchtitan-env.sh
#                           puts it on PYTHONPATH only where the image's is older).
#   .deps/torchtitan-assets torchtitan's test tokenizer and tools/fixtures/make_c4_mini.py's data set.
# Versions, as in docs/reference-runs/torchtitan-e51e914: the newest releases before the torchtitan
# commit, except datasets 4.8.5 (2026-04), whose pins allow dill 0.4.1 and multiprocess 0.70.19
# (4.6.1 wants dill < 0.4.1); multiprocess from its py3.12 tree (the image's Python). Each package
# gets a minimal NAME-VERSION.dist-info (METADATA and its licence) as a wheel would: torchtitan's
# __version__, datasets' config (dill's version) and the env check read them; the version files that
# shtab's, torchdata's, dill's and multiprocess's builds write are written here the same way.
# Usage: tools/torchtitan/carry.sh [MIRROR_DIR]   (default /work/.mirror: OWNER+NAME/repo, bare git
# directories as the `fetch` tool leaves them, of the repositories named below). Rebuilds from scratch.
set -euo pipefail
mirror=${1:-/work/.mirror}
repo=$(cd "$(dirname "$0")/../.." && pwd)
py=$repo/.deps/python fallback=$repo/.deps/python-fallback assets=$repo/.deps/torchtitan-assets
rm -rf "$py" "$fallback" "$assets" && mkdir -p "$py" "$fallback" "$assets"

# carry DEST OWNER/NAME REF DIST VERSION LICENCE PATH...: each PATH (a folder or a file) of the
# repository at REF into DEST under its own base name, and DIST-VERSION.dist-info; one MANIFEST line.
carry() {
  local dest=$1 name=$2 ref=$3 dist=$4 version=$5 licence=$6 path; shift 6
  local git=$mirror/${name/\//+}/repo info=$dest/$dist-$version.dist-info
  for path; do
    if [ "$(git -C "$git" cat-file -t "$ref:$path")" = tree ]; then
      git -C "$git" archive --prefix="$(basename "$path")/" "$ref:$path" | tar x -C "$dest"
    else
      git -C "$git" show "$ref:$path" > "$dest/$(basename "$path")"
    fi
  done
  mkdir -p "$info"
  git -C "$git" show "$ref:$licence" > "$info/$(basename "$licence")"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "$dist" "$version" > "$info/METADATA"
  echo "$name $ref = $(git -C "$git" rev-parse "$ref^{commit}") ($(git -C "$git" log -1 --format=%cs "$ref")):" \
    "$* -> $dist $version" >> "$dest/MANIFEST.txt"
}
# The __info__.py that dill's and multiprocess's setup.py write (their own version.py), into DEST/MODULE.
uq_info() {  # uq_info OWNER/NAME REF DEST MODULE
  local tmp; tmp=$(mktemp -d)
  git -C "$mirror/${1/\//+}/repo" archive "$2" version.py README.md LICENSE | tar x -C "$tmp"
  (cd "$tmp" && python3 -c 'import sys, version as v
v.write_info_file(sys.argv[1], sys.argv[2], doc=v.get_readme_as_rst("README.md"),
                  license=v.get_license_text("LICENSE"), version=v.__version__, author=v.__author__)' "$3" "$4")
  rm -rf "$tmp"
}

tt=e51e914
carry "$py" pytorch/torchtitan $tt torchtitan 0.2.2+gite51e914 LICENSE torchtitan
carry "$py" brentyi/tyro v1.0.8 tyro 1.0.8 LICENSE src/tyro
carry "$py" agronholm/typeguard 4.5.1 typeguard 4.5.1 LICENSE src/typeguard
carry "$py" rr-/docstring_parser 0.17.0 docstring_parser 0.17.0 LICENSE.md docstring_parser
carry "$py" iterative/shtab v1.8.0 shtab 1.8.0 LICENCE shtab
echo "__version__ = '1.8.0'" > "$py/shtab/_dist_ver.py"  # setuptools_scm's file
carry "$py" meta-pytorch/data v0.11.0 torchdata 0.11.0 LICENSE torchdata
printf "__version__ = '0.11.0'\ngit_version = '%s'\n" "$(git -C "$mirror/meta-pytorch+data/repo" rev-parse 'v0.11.0^{commit}')" \
  > "$py/torchdata/version.py"  # setup.py's _export_version
carry "$py" huggingface/datasets 4.8.5 datasets 4.8.5 LICENSE src/datasets
carry "$py" uqfoundation/dill 0.4.1 dill 0.4.1 LICENSE dill
uq_info uqfoundation/dill 0.4.1 "$py" dill
carry "$py" uqfoundation/multiprocess 0.70.19 multiprocess 0.70.19 LICENSE py3.12/multiprocess py3.12/_multiprocess
uq_info uqfoundation/multiprocess 0.70.19 "$py" multiprocess
carry "$fallback" python/typing_extensions 4.15.0 typing_extensions 4.15.0 LICENSE src/typing_extensions.py

git -C "$mirror/pytorch+torchtitan/repo" archive --prefix=tests/assets/tokenizer/ $tt:tests/assets/tokenizer | tar x -C "$assets"
python3 "$repo/tools/fixtures/make_c4_mini.py" --out "$assets/tests/assets/c4_test"
cat "$py/MANIFEST.txt" "$fallback/MANIFEST.txt"
du -sh "$py" "$fallback" "$assets"
