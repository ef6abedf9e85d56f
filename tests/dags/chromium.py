"""Screenshots of the Airflow UI with Debian's headless Chromium, over the DevTools protocol.

Chromium's own ``--screenshot`` flag cannot log in; the DevTools protocol can set the
``_token`` cookie the Airflow UI reads (the JWT the REST API hands out) before loading a
page, and wait until the page shows what the test expects.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
import subprocess
import threading
import time
from pathlib import Path

from websockets.sync.client import connect

from tests.helpers import system_tool


class DevTools:
    def __init__(self, ws):
        self.ws = ws
        self.ids = itertools.count(1)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        message_id = next(self.ids)
        message = {"id": message_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=60))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})


def screenshot(url: str, token: str | None, out: Path, wait_for_text: str, timeout: float = 90.0,
               offline: bool = False) -> str:
    """Load ``url`` logged in with ``token`` (None: no login), wait for ``wait_for_text``, save
    a PNG; returns the page text. ``offline``: the browser has no network at all."""
    chromium = system_tool("chromium", "chromium")
    profile = out.parent / "chromium-profile"
    browser = subprocess.Popen(
        [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--remote-debugging-port=0", f"--user-data-dir={profile}", "--window-size=1400,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        ws_url = None
        for line in browser.stderr:  # "DevTools listening on ws://127.0.0.1:PORT/devtools/browser/ID"
            if found := re.search(r"(ws://\S+)", line):
                ws_url = found.group(1)
                break
        assert ws_url, "chromium did not open its DevTools port"
        threading.Thread(target=browser.stderr.read, daemon=True).start()  # never let its log pipe fill
        with connect(ws_url, max_size=64 * 1024 * 1024) as ws:
            tools = DevTools(ws)
            target = tools.call("Target.createTarget", url="about:blank")["targetId"]
            session = tools.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            tools.call("Network.enable", session)
            if offline:
                tools.call("Network.emulateNetworkConditions", session, offline=True, latency=0,
                           downloadThroughput=-1, uploadThroughput=-1)
            if token is not None:
                tools.call("Network.setCookie", session, name="_token", value=token, url=url)
            tools.call("Page.navigate", session, url=url)
            deadline, text = time.monotonic() + timeout, ""
            while time.monotonic() < deadline:
                text = tools.call("Runtime.evaluate", session, expression="document.body ? document.body.innerText : ''",
                                  returnByValue=True)["result"].get("value", "")
                if wait_for_text in text:
                    break
                time.sleep(1)
            time.sleep(1)  # let the last render settle before the picture
            png = tools.call("Page.captureScreenshot", session, format="png")["data"]
            out.write_bytes(base64.b64decode(png))
            return text
    finally:
        browser.terminate()
        browser.wait(20)
