#!/usr/bin/env python3
"""Prints the DOM of a page loaded with JavaScript off, as Chromium built it.

Chromium's --dump-dom serializes through JavaScript, so with scripts disabled it prints
nothing; this talks the DevTools protocol over --remote-debugging-pipe instead (JSON
messages ending in NUL on fds 3 and 4) and asks DOM.getOuterHTML, which needs no script.

    dump_dom_nojs.py CHROMIUM URL [CHROMIUM_FLAG...]
Standard library only.
"""
import fcntl
import json
import os
import subprocess
import sys
import time


class Pipe:
    """One DevTools connection: send a command, wait for its answer or an event."""

    def __init__(self, argv):
        to_child_r, self.write_fd = os.pipe()
        self.read_fd, from_child_w = os.pipe()
        # The child reads commands on fd 3 and writes answers on fd 4; moving both ends above
        # fd 10 first keeps the first dup2 from overwriting the other end.
        def to_fds_3_and_4():
            high_r, high_w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(argv, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=to_fds_3_and_4)
        os.close(to_child_r)
        os.close(from_child_w)
        self.buffer = b""
        self.next_id = 0

    def _message(self, deadline):
        while b"\0" not in self.buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed the pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method, params=None, session=None, timeout=60):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.write_fd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            answer = self._message(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})

    def wait_event(self, method, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            if self._message(deadline).get("method") == method:
                return

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    chromium, url, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    pipe = Pipe([chromium, *flags, "--remote-debugging-pipe", "about:blank"])
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        pipe.call("Emulation.setScriptExecutionDisabled", {"value": True}, session)
        pipe.call("Page.enable", session=session)
        pipe.call("Page.navigate", {"url": url}, session)
        pipe.wait_event("Page.loadEventFired")
        root = pipe.call("DOM.getDocument", {"depth": 0}, session)["root"]["nodeId"]
        sys.stdout.write(pipe.call("DOM.getOuterHTML", {"nodeId": root}, session)["outerHTML"])
    finally:
        pipe.close()


if __name__ == "__main__":
    main()
