#!/usr/bin/env bash
# How big report.html gets and how fast headless Chromium opens it, for a made-up summary of N
# cases (tools/bench/fake_summary.py: passes, canaries with charts, crashes, reshard chains).
#   tools/bench/report_html.sh [N] [MESHTEST]         # render with `meshtest report --html`
#   tools/bench/report_html.sh --html REPORT_HTML     # time a report rendered elsewhere
# Prints: cases, size, render time, and DOMContentLoaded / load as performance.now() in the page.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [[ ${1:-} == --html ]]; then
  report=$(realpath "$2")
  cases=$(grep -o '<details class="case' "$report" | wc -l)
  render="(rendered elsewhere)"
else
  cases=${1:-1000}
  meshtest=${2:-$(ls "$here"/../../build/cpu/meshtest 2>/dev/null || command -v meshtest || true)}
  if [[ -z $meshtest || ! -x $meshtest ]]; then
    echo "report_html: no meshtest binary (build target meshtest, or pass its path)" >&2
    exit 2
  fi
  python3 "$here/fake_summary.py" "$cases" "$work/out"
  report=$work/out/report.html
  start=$(date +%s%N)
  "$meshtest" report "$work/out" --html "$report" >/dev/null || true  # exit 1: the made-up cases fail
  render="$(( ($(date +%s%N) - start) / 1000000 )) ms"
fi

chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  echo "report_html: chromium is not installed; size only"
fi

# A copy with a stamp of performance.now() at DOMContentLoaded and load, read back from the DOM
# (the page's CSP allows inline scripts and nothing else, so this one runs too).
stamp="<script>document.addEventListener('DOMContentLoaded',function(){document.documentElement.setAttribute('data-dcl-ms',performance.now().toFixed(1))});window.addEventListener('load',function(){document.documentElement.setAttribute('data-load-ms',performance.now().toFixed(1))});</script>"
sed "0,/<\/head>/s||$stamp</head>|" "$report" >"$work/timed.html"

size=$(stat -c %s "$report")
printf 'report_html: %s cases, report.html %s bytes (%.2f MiB), rendered in %s\n' \
  "$cases" "$size" "$(echo "$size / 1048576" | bc -l)" "$render"
if [[ -n $chromium ]]; then
  flags=(--headless=new --disable-gpu --user-data-dir="$work/profile" --no-first-run)
  [[ $(id -u) -eq 0 ]] && flags+=(--no-sandbox)
  for run in 1 2 3; do
    start=$(date +%s%N)
    timeout 300 "$chromium" "${flags[@]}" --dump-dom "file://$work/timed.html" 2>/dev/null >"$work/dom.html"
    wall=$((($(date +%s%N) - start) / 1000000))
    dcl=$(grep -o 'data-dcl-ms="[0-9.]*"' "$work/dom.html" | grep -o '[0-9.]*' || echo "?")
    load=$(grep -o 'data-load-ms="[0-9.]*"' "$work/dom.html" | grep -o '[0-9.]*' || echo "?")
    echo "report_html: run $run: DOMContentLoaded ${dcl} ms, load ${load} ms (chromium start to exit ${wall} ms)"
  done
fi
