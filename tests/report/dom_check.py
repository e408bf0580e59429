#!/usr/bin/env python3
"""Checks a DOM that headless Chromium dumped from report.html against the summary.json it
was rendered from. Standard library only; used by browser_check.sh.

    dom_check.py DOM_HTML SUMMARY_JSON --js     # scripts ran: no errors, filters live
    dom_check.py DOM_HTML SUMMARY_JSON --no-js  # static page: every case still listed

Prints one line per problem and exits 1 if there is any.
"""
import html.parser
import json
import re
import sys

ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|.)", re.S)
ID_CAP = 500  # html_report.cpp's kLineCap: longer ids are truncated on the page
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


def as_shown(text):
    """What the page shows for a summary string: ANSI gone, control characters as \\xNN."""
    text = ANSI.sub("", text)
    text = "".join(ch if ch in "\t\n\r" or ord(ch) >= 0x20 else "\\x%02x" % ord(ch) for ch in text)
    return text


def step_text(step):
    """A step as html_report.cpp writes it into data-step."""
    return str(step) if isinstance(step, int) else "%.6g" % step


class Case:
    def __init__(self, attrs):
        self.attrs = attrs
        self.id = self.status = self.kind = ""
        self.series = set()
        self.marker_steps = set()


class DomParser(html.parser.HTMLParser):
    """Collects the case sections and the few elements the checks need."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cases = []
        self.case = None
        self.capture = None  # ("id" | "status" | "kind" | "js-errors" | "shown", depth)
        self.depth = 0
        self.case_depth = None
        self.js_errors = ""
        self.shown = ""
        self.filters_hidden = None
        self.external = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        for key in ("src", "href", "action", "srcset"):
            if re.match(r"^\s*(https?:|//)", a.get(key) or ""):
                self.external.append(f"<{tag} {key}={a[key]}>")
        if tag in ("link", "iframe", "object", "embed"):
            self.external.append(f"<{tag}>")
        self.depth += 1
        if tag == "details" and "case" in classes:
            self.case = Case(a)
            self.case_depth = self.depth
            self.cases.append(self.case)
        if a.get("id") == "js-errors":
            self.capture = ("js-errors", self.depth)
        elif a.get("id") == "shown":
            self.capture = ("shown", self.depth)
        elif a.get("id") == "filters":
            self.filters_hidden = "hidden" in a
        elif self.case is not None:
            if "case-id" in classes:
                self.capture = ("id", self.depth)
            elif "badge" in classes and not self.case.status:
                self.capture = ("status", self.depth)
            elif "kind" in classes and not self.case.kind:
                self.capture = ("kind", self.depth)
            if a.get("data-series"):
                self.case.series.add(a["data-series"])
            if "marker" in classes and "data-step" in a:
                self.case.marker_steps.add(a["data-step"])
        if tag in VOID:
            self.depth -= 1  # no end tag will come

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if self.capture and self.capture[1] == self.depth:
            self.capture = None
        if self.case is not None and self.case_depth == self.depth:
            self.case = None
        self.depth -= 1

    def handle_data(self, data):
        if not self.capture:
            return
        what = self.capture[0]
        if what == "js-errors":
            self.js_errors += data
        elif what == "shown":
            self.shown += data
        else:
            setattr(self.case, what, getattr(self.case, what) + data)


def main():
    dom_path, summary_path, mode = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(summary_path, encoding="utf-8", errors="replace") as f:
        summary = json.load(f)
    parser = DomParser()
    with open(dom_path, encoding="utf-8", errors="replace") as f:
        parser.feed(f.read())
    problems = []
    by_id = {}
    for c in parser.cases:
        by_id.setdefault(c.id, c)
    expected = summary.get("cases", [])
    if len(parser.cases) != len(expected):
        problems.append(f"{len(parser.cases)} case sections on the page, {len(expected)} in the summary")
    for case in expected:
        cid = as_shown(case.get("id", ""))
        found = by_id.get(cid) or next((c for c in parser.cases if c.id.startswith(cid[:ID_CAP // 2])), None)
        if found is None:
            problems.append(f"case {cid!r}: not on the page")
            continue
        if found.status != as_shown(case.get("status", "")):
            problems.append(f"case {cid!r}: status {found.status!r} on the page, {case.get('status')!r} in the summary")
        kind = as_shown((case.get("verdict") or {}).get("kind", ""))
        if found.kind != kind:
            problems.append(f"case {cid!r}: verdict {found.kind!r} on the page, {kind!r} in the summary")
        if "hidden" in found.attrs:
            problems.append(f"case {cid!r}: hidden although no filter is set")
        for check in case.get("checks", []):
            if check.get("step") is None or not check.get("series"):
                continue
            missing = ({s.get("role") for s in check["series"]} & {"subject", "reference"}) - found.series
            for role in sorted(missing):
                problems.append(f"case {cid!r}: no data-series={role!r} path for check {check.get('kind')}")
            if step_text(check["step"]) not in found.marker_steps:
                problems.append(f"case {cid!r}: no marker with data-step={step_text(check['step'])!r} "
                                f"(markers: {sorted(found.marker_steps)})")
            elif not missing and mode == "--js":
                print(f"chart: {cid} {check.get('kind')}: subject and reference drawn, "
                      f"marker at step {step_text(check['step'])}")
    if parser.js_errors.strip():
        problems.append("#js-errors: " + parser.js_errors.strip()[:2000])
    if parser.external:
        problems.append("external resources: " + ", ".join(parser.external[:10]))
    n = len(expected)
    if mode == "--js":
        if parser.filters_hidden is not False:
            problems.append("the filter form is still hidden: the script did not run")
        if parser.shown.strip() != f"{n} of {n} cases shown":
            problems.append(f"#shown says {parser.shown.strip()!r}, expected '{n} of {n} cases shown'")
    elif parser.shown.strip():
        problems.append(f"scripts were off but #shown says {parser.shown.strip()!r}")
    for p in problems:
        print("FAIL:", p)
    print(f"dom_check {mode}: {len(parser.cases)} cases checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
