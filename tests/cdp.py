"""Headless Chromium driven through the DevTools protocol on a pipe (--remote-debugging-pipe:
Chromium reads commands on its descriptor 3 and answers on 4, each message JSON ended by a
NUL), so that a test can move the mouse, press keys, read the page and take a screenshot
with Python's standard library alone."""
import base64
import json
import os
import subprocess


class Browser:
    def __init__(self, chromium, profile, width=1200, height=900):
        to_chrome, self._to = os.pipe()
        self._from, from_chrome = os.pipe()

        def descriptors():  # in the child: the pipes at 3 and 4, left open across exec
            a, b = os.dup(to_chrome), os.dup(from_chrome)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen([chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--remote-debugging-pipe", "--user-data-dir=" + profile, "about:blank"],
                                     close_fds=False, preexec_fn=descriptors,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf, self._id, self.events = b"", 0, []
        target = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=target["targetId"], flatten=True)["sessionId"]
        self.call("Page.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _message(self):
        while b"\0" not in self._buf:
            chunk = os.read(self._from, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self._buf += chunk
        text, self._buf = self._buf.split(b"\0", 1)
        return json.loads(text)

    def call(self, method, session=False, **params):
        """Sends one command and returns its result; events that come first are kept."""
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._message()
            if m.get("id") == self._id:
                if "error" in m:
                    raise RuntimeError("%s: %s" % (method, m["error"]))
                return m["result"]
            self.events.append(m)

    def wait_event(self, method):
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message())

    def open(self, path):
        """A file, or a URL."""
        self.events.clear()
        self.call("Page.navigate", session=True, url=path if "://" in path else "file://" + os.path.abspath(path))
        self.wait_event("Page.loadEventFired")

    def eval(self, expression):
        """The expression's value (a promise's, once it settles)."""
        r = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(r["exceptionDetails"].get("exception", {}).get("description", str(r)))
        return r["result"].get("value")

    def frame(self):
        """Waits until the page has drawn what the last input changed."""
        self.eval("new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))")

    def mouse(self, kind, x, y, buttons=0):
        self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, button="left" if kind != "mouseMoved"
                  or buttons else "none", buttons=buttons, clickCount=2 if kind == "doubleClick" else 1)

    def drag(self, x0, y, x1):
        self.mouse("mouseMoved", x0, y)
        self.mouse("mousePressed", x0, y, 1)
        self.mouse("mouseMoved", (x0 + x1) / 2, y, 1)
        self.mouse("mouseMoved", x1, y, 1)
        self.mouse("mouseReleased", x1, y, 1)
        self.frame()

    KEYS = {"ArrowRight": 39, "ArrowLeft": 37, "ArrowUp": 38, "ArrowDown": 40, "Enter": 13, "Escape": 27, "+": 187, "-": 189, "Home": 36, "End": 35}

    def key(self, key):
        code = self.KEYS[key]
        for kind in ("rawKeyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, windowsVirtualKeyCode=code,
                      nativeVirtualKeyCode=code)
        self.frame()

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to)
        os.close(self._from)
