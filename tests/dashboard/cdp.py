"""A small DevTools-protocol client of a headless system Chromium (Debian's chromium), over
python3-websocket: start the browser with a fresh profile, open a page, evaluate JavaScript,
collect every JavaScript error, take screenshots. No browser download, no pip package."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request

import websocket  # Debian: python3-websocket

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--remote-debugging-port=0", "--window-size=1400,1000", "--hide-scrollbars"]


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


class Browser:
    """One headless Chromium with its own --user-data-dir; a page attached over the DevTools protocol."""

    def __init__(self, binary=None, timeout=60):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise RuntimeError("no chromium (scripts/install-deps.sh installs Debian's chromium)")
        self.profile = tempfile.mkdtemp(prefix="moerl-chromium-")
        self.proc = subprocess.Popen([self.binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        t0 = time.time()
        while not os.path.exists(port_file) or os.path.getsize(port_file) == 0:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            if time.time() - t0 > timeout:
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = []
        while not pages:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as f:
                pages = [t for t in json.load(f) if t.get("type") == "page"]
            time.sleep(0.05)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=timeout,
                                              suppress_origin=True)
        self.next_id = 0
        self.errors = []  # every JavaScript exception, console.error and failed load, as text
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")

    def _event(self, msg):
        m, p = msg.get("method"), msg.get("params", {})
        if m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            self.errors.append("exception: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            self.errors.append("console.error: " + " ".join(str(a.get("value", a.get("description", "")))
                                                           for a in p.get("args", [])))
        elif m == "Log.entryAdded" and p["entry"].get("level") == "error":
            self.errors.append(f"{p['entry'].get('source')}: {p['entry'].get('text')} {p['entry'].get('url', '')}")

    def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self._event(msg)

    def pump(self, seconds):
        """Reads the events that arrive within `seconds`."""
        self.ws.settimeout(seconds)
        try:
            while True:
                self._event(json.loads(self.ws.recv()))
        except websocket.WebSocketTimeoutException:
            pass
        finally:
            self.ws.settimeout(60)

    def eval(self, expr):
        """The value of a JavaScript expression (awaited when it is a promise)."""
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise RuntimeError(f"{expr[:80]}...: " + (d.get("exception", {}).get("description") or d.get("text", "")))
        return r["result"].get("value")

    def wait_for(self, expr, timeout=30, what=None):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.eval(expr):
                return
            self.pump(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what or expr}")

    def open(self, url):
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", what="the page to load")

    def mouse(self, kind, x, y, **kw):
        """A real mouse event at viewport coordinates (Input.dispatchMouseEvent: mouseMoved,
        mousePressed, mouseReleased)."""
        self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, **kw)

    def screenshot(self, path, width=1400, height=1000):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)
        self.pump(0.5)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        except Exception:
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
