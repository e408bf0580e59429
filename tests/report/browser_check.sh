#!/usr/bin/env bash
# Opens report.html in headless Chromium and checks what a person would see:
#  (a) scripts on: no JavaScript errors, no console messages, every case of the summary with its
#      status and verdict, and for each check with a step and series, both series and a marker
#      at that step inside the case's section;
#  (b) scripts off: every case and verdict still listed;
#  (c) a screenshot renders.
#   browser_check.sh REPORT_HTML EXPECT_JSON OUT_DIR
# Exit 0: all good; 1: a check failed; 2: usage; 77: Chromium is not installed (skip).
set -uo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 REPORT_HTML EXPECT_JSON OUT_DIR" >&2
  exit 2
fi
report=$(realpath "$1") expect=$(realpath "$2") out=$3
here=$(cd "$(dirname "$0")" && pwd)
chromium=$(command -v chromium || command -v chromium-browser || true)
if [[ -z $chromium ]]; then
  echo "browser_check: SKIP: chromium is not installed (apt-get install -y chromium)"
  exit 77
fi
for f in "$report" "$expect"; do
  [[ -f $f ]] || { echo "browser_check: no such file: $f" >&2; exit 2; }
done
mkdir -p "$out"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

flags=(--headless=new --disable-gpu --user-data-dir="$profile" --no-first-run --disable-extensions)
[[ $(id -u) -eq 0 ]] && flags+=(--no-sandbox)  # Chromium refuses to run as root with its sandbox
url="file://$report"
failed=0

# Runs Chromium with the given flags; stdout to $1, stderr to $2.
run_chromium() {
  local stdout=$1 stderr=$2
  shift 2
  timeout 120 "$chromium" "${flags[@]}" "$@" "$url" >"$stdout" 2>"$stderr"
}

echo "browser_check: (a) scripts on: $url"
if ! run_chromium "$out/dom-js.html" "$out/chromium-js.log" --enable-logging=stderr --v=0 --dump-dom; then
  echo "FAIL: chromium --dump-dom exited non-zero (log: $out/chromium-js.log)"
  failed=1
fi
python3 "$here/dom_check.py" "$out/dom-js.html" "$expect" --js || failed=1
# Chromium logs every console message at INFO level whatever its severity, and the report never
# writes to the console: so any console line (an uncaught error, a CSP violation) is a failure.
if grep -E 'Uncaught|:CONSOLE' "$out/chromium-js.log" >"$out/console.txt"; then
  echo "FAIL: console messages while loading the page:"
  head -20 "$out/console.txt"
  failed=1
fi

echo "browser_check: (b) scripts off"
# --dump-dom serializes through JavaScript and prints nothing with scripts off: ask DevTools.
if ! timeout 120 python3 "$here/dump_dom_nojs.py" "$chromium" "$url" "${flags[@]}" \
    --blink-settings=scriptEnabled=false >"$out/dom-nojs.html" 2>"$out/chromium-nojs.log"; then
  echo "FAIL: could not dump the DOM with scripts off (log: $out/chromium-nojs.log)"
  failed=1
fi
python3 "$here/dom_check.py" "$out/dom-nojs.html" "$expect" --no-js || failed=1

echo "browser_check: (c) screenshot"
rm -f "$out/report.png"
run_chromium /dev/null "$out/chromium-shot.log" --screenshot="$out/report.png" --window-size=1400,2400 \
  --hide-scrollbars || true
if [[ $(head -c 8 "$out/report.png" 2>/dev/null | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
  echo "browser_check: screenshot $out/report.png ($(stat -c %s "$out/report.png") bytes)"
else
  echo "FAIL: no PNG screenshot at $out/report.png (log: $out/chromium-shot.log)"
  failed=1
fi

if [[ $failed -ne 0 ]]; then
  echo "browser_check: FAILED ($report)"
  exit 1
fi
echo "browser_check: OK ($report)"
