"""Open a page in headless Chromium, record every request it makes, and screenshot it whole.

Chromium (the Debian package `chromium`; `make test` installs it when absent) runs with
`--remote-debugging-pipe`: the DevTools protocol over two pipes (fd 3 in, fd 4 out, one JSON
message per NUL-terminated chunk), so no websocket client is needed. The page's target has the
Network domain enabled before it navigates, so every request the page makes is an event we
keep (`Network.requestWillBeSent`, `data:` URIs included). Chromium also runs with a proxy on
a closed port and every host name mapped to nothing, so a request that slipped through would
still reach nobody; the recorded requests are what a test asserts on.

Run as a script, it writes a screenshot of the whole page as a palette PNG (96 colours, small
enough to commit; the charts use fewer): `python tests/browser.py PAGE.html OUT.png`.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

WIDTH = 1200
TIMEOUT_S = 60.0
FLAGS = (
    "--headless",
    "--no-sandbox",  # root in a container: the sandbox cannot start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--proxy-server=127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-pipe",
)
BOXES = """JSON.stringify({
  height: Math.ceil(document.documentElement.scrollHeight),
  charts: [...document.querySelectorAll('figure.chart')].map(figure => {
    const img = figure.querySelector('img');
    const box = img.getBoundingClientRect();
    return {id: figure.id, x: box.left + window.scrollX, y: box.top + window.scrollY,
            width: box.width, height: box.height,
            loaded: img.complete && img.naturalWidth > 0};
  })
})"""


@dataclass(frozen=True)
class ChartBox:
    id: str
    x: float
    y: float
    width: float
    height: float
    loaded: bool
    """The image decoded: complete, with a natural width."""


@dataclass(frozen=True)
class Page:
    url: str
    requests: tuple[str, ...]
    """Every URL the page asked for, the document's own first."""
    charts: tuple[ChartBox, ...]
    screenshot: Path


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("no chromium on PATH: `make test` installs the Debian package")
    return found


class _Pipe:
    """The DevTools protocol over Chromium's pipe: send a command, wait for its answer,
    keeping every event that arrives meanwhile."""

    def __init__(self, to_browser: int, from_browser: int) -> None:
        self.to_browser, self.from_browser = to_browser, from_browser
        self.buffer = b""
        self.last_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str = "") -> Any:
        self.last_id += 1
        message: dict[str, Any] = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._next()
            if answer.get("id") == self.last_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer["result"]
            self.events.append(answer)

    def wait_for(self, method: str) -> None:
        while not any(event.get("method") == method for event in self.events):
            self.events.append(self._next())

    def _next(self) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while b"\0" not in self.buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.from_browser], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"chromium said nothing for {TIMEOUT_S} s")
            chunk = os.read(self.from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its pipe")
            self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        message: dict[str, Any] = json.loads(raw)
        return message


def open_page(page: Path, screenshot: Path, *, width: int = WIDTH) -> Page:
    """Load `page` (a file) in headless Chromium at `width` CSS pixels, record its requests and
    where each chart is, and save a screenshot of the whole page to `screenshot`."""
    if not page.is_file():
        raise FileNotFoundError(page)
    url = page.resolve().as_uri()
    command_in, browser_reads = os.pipe()
    browser_writes, answers_out = os.pipe()
    profile = tempfile.mkdtemp(prefix="repro-chromium-")

    def pipes_on_3_and_4() -> None:  # in the child, before exec
        reads, writes = os.dup(command_in), os.dup(answers_out)
        os.dup2(reads, 3)
        os.dup2(writes, 4)

    process = subprocess.Popen(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        preexec_fn=pipes_on_3_and_4,  # noqa: PLW1509 - the only way to place fds 3 and 4
        close_fds=False,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(command_in)
    os.close(answers_out)
    pipe = _Pipe(browser_reads, browser_writes)
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        pipe.send("Network.enable", {}, session)
        pipe.send("Page.enable", {}, session)
        metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}
        pipe.send("Emulation.setDeviceMetricsOverride", metrics, session)
        pipe.send("Page.navigate", {"url": url}, session)
        pipe.wait_for("Page.loadEventFired")
        evaluated = pipe.send(
            "Runtime.evaluate", {"expression": BOXES, "returnByValue": True}, session
        )
        layout = json.loads(evaluated["result"]["value"])
        clip = {"x": 0, "y": 0, "width": width, "height": layout["height"], "scale": 1}
        shot = pipe.send(
            "Page.captureScreenshot",
            {"format": "png", "captureBeyondViewport": True, "clip": clip},
            session,
        )
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        requests = tuple(
            event["params"]["request"]["url"]
            for event in pipe.events
            if event.get("method") == "Network.requestWillBeSent"
        )
        pipe.send("Browser.close")
        process.wait(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(browser_reads)
        os.close(browser_writes)
        shutil.rmtree(profile, ignore_errors=True)
    return Page(
        url=url,
        requests=requests,
        charts=tuple(ChartBox(**box) for box in layout["charts"]),
        screenshot=screenshot,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python tests/browser.py PAGE.html OUT.png")
    from PIL import Image

    opened = open_page(Path(sys.argv[1]), Path(sys.argv[2]))
    with Image.open(opened.screenshot) as shot:
        palette = shot.convert("RGB").quantize(
            colors=96, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE
        )
    palette.save(opened.screenshot, optimize=True)
    print(f"{opened.screenshot}: {len(opened.charts)} charts, {len(opened.requests)} requests")
