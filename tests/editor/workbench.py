"""Real VS Code for the editor's tests: code-server, installed by tests/editor/install, with the
extension packed from editors/vscode, shown in Debian's headless Chromium through Playwright,
and driven as a user drives it: keys, clicks, and what the views show."""

from __future__ import annotations

import contextlib
import json
import os
import re
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from playwright.sync_api import Page, expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent.parent
EXTENSION = ROOT / "editors" / "vscode"
CHROMIUM = "/usr/bin/chromium"
# What runs Chromium headless in a container with no GPU, no sandbox and no network to reach.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 60_000
SETTINGS = {
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "update.mode": "none",
    "debug.openDebug": "openOnDebugBreak",
    "debug.internalConsoleOptions": "neverOpen",
    "editor.minimap.enabled": False,
    "window.commandCenter": False,
}


def node_bin(cache: Path) -> Path:
    """The folder of the Node.js that code-server was installed with."""
    return cache / "node" / "node_modules" / ".bin"


def pack_extension(cache: Path, into: Path) -> Path:
    """editors/vscode packed by vsce, as a user's `vsce package` makes it."""
    vsix = into / "monarch-pdb.vsix"
    run([str(cache / "node_modules" / ".bin" / "vsce"), "package", "--skip-license", "--allow-missing-repository",
         "--out", str(vsix)], cwd=EXTENSION, cache=cache)
    return vsix


def run(command: list[str], cwd: Path, cache: Path, env: dict[str, str] | None = None) -> str:
    environ = dict(env or os.environ)
    environ["PATH"] = f"{node_bin(cache)}:{environ['PATH']}"
    done = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done.stdout


class CodeServer:
    """code-server on an ephemeral port, serving `workspace` with the packed extension installed;
    the editor's processes (and the adapter it starts) get `env`."""

    def __init__(self, cache: Path, env: dict[str, str], workspace: Path, home: Path) -> None:
        self.cache, self.env, self.workspace, self.home = cache, env, workspace, home
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> CodeServer:
        data, extensions = self.home / "data", self.home / "extensions"
        (data / "User").mkdir(parents=True)
        (data / "User" / "settings.json").write_text(json.dumps(SETTINGS))
        config = self.home / "config.yaml"
        config.write_text("bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n")
        server = str(self.cache / "node_modules" / ".bin" / "code-server")
        flags = ["--config", str(config), "--user-data-dir", str(data), "--extensions-dir", str(extensions),
                 "--disable-telemetry", "--disable-update-check", "--disable-workspace-trust",
                 "--disable-getting-started-override"]
        run([server, *flags, "--install-extension", str(pack_extension(self.cache, self.home))],
            cwd=self.home, cache=self.cache, env=self.env)
        environ = dict(self.env)
        environ["PATH"] = f"{node_bin(self.cache)}:{environ['PATH']}"
        self.proc = subprocess.Popen([server, *flags, str(self.workspace)], env=environ, cwd=self.home,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        try:
            address = self.wait_for_line(r"HTTP server listening on (http://\S+)")
            self.url = f"{address.rstrip('/')}/?folder={self.workspace}"
        except BaseException:
            self.__exit__()
            raise
        return self

    def wait_for_line(self, pattern: str, timeout: float = 120.0) -> str:
        """What `pattern` matched in code-server's output, read by a thread that goes on reading
        it (so code-server never blocks on a full pipe)."""
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=lambda: [*map(lines.put, self.proc.stdout), lines.put(None)], daemon=True).start()
        deadline = time.monotonic() + timeout
        seen = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            found = re.search(pattern, line)
            if found:
                return found.group(1)
        raise RuntimeError(f"code-server did not say {pattern!r}: {''.join(seen)}")

    def wait_for_extensions(self, timeout: float = 120.0) -> None:
        """Until the extension host has taken the installed extensions: before that the workbench
        knows no debugger of theirs, and F5 is bound to nothing (the key does nothing at all)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any("Eager extensions activated" in log.read_text()
                   for log in (self.home / "data" / "logs").glob("*/exthost*/remoteexthost.log")):
                return
            time.sleep(0.1)
        raise RuntimeError(f"code-server's extension host did not start in {timeout:.0f} s (logs in {self.home / 'data' / 'logs'})")

    def __exit__(self, *_: object) -> None:
        """code-server ends its extension host, and so the adapter; whatever is left is killed."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.contextmanager
def browser(url: str, profile: Path) -> Iterator[Page]:
    """The workbench at `url` in headless Chromium with a new empty profile, tall enough that
    the Call Stack shows every thread of the guide's 16 ranks without scrolling."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1600, "height": 3000})
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(WAIT_MS)
            expect.set_options(timeout=WAIT_MS)
            page.goto(url)
            page.locator(".monaco-workbench .part.statusbar").wait_for()
            yield page
        finally:
            context.close()


@contextlib.contextmanager
def step(page: Page, name: str) -> Iterator[None]:
    """One step of the user's; when it fails, the screen as it was (and its HTML, to write the
    step's locators from) is kept in EDITOR_SCREENSHOTS."""
    try:
        yield
    except BaseException:
        folder = os.environ.get("EDITOR_SCREENSHOTS")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(Exception):
                page.screenshot(path=str(Path(folder) / f"{name}.png"))
            with contextlib.suppress(Exception):
                (Path(folder) / f"{name}.html").write_text(page.content())
        raise



def thread(page: Page, rank: int, actor: str = "debugee"):
    """The Call Stack's label of rank `rank`'s thread (`debugee 5 · host · ...`)."""
    return page.locator(".debug-call-stack .monaco-list-row").locator(thread_label(page, rank, actor))


def thread_row(page: Page, rank: int, actor: str = "debugee"):
    """The Call Stack's row of rank `rank`'s thread: its label, state and actions."""
    return page.locator(".debug-call-stack .monaco-list-row", has=thread_label(page, rank, actor))


def thread_label(page: Page, rank: int, actor: str = "debugee"):
    return page.locator(".thread", has_text=re.compile(rf"^{re.escape(actor)} {rank} ·"))


def top_frame(page: Page, rank: int, actor: str = "debugee"):
    """The Call Stack's top frame of rank `rank`'s thread, shown expanded."""
    return top_frame_row(page, rank, actor).locator(".stack-frame")


def top_frame_row(page: Page, rank: int, actor: str = "debugee"):
    """The Call Stack's row of the top frame of rank `rank`'s thread, shown expanded: the row
    below the thread's (the list's rows are not nested, and only those on screen exist). Both
    rows are found in one look at the list, at each try: rows above move as other threads exit
    or show the rest of their frames, and a position read before is then another row."""
    row = thread_row(page, rank, actor)
    if row.get_attribute("aria-expanded") != "true":
        row.click()
        expect(row).to_have_attribute("aria-expanded", "true")
    rows = f"//*[{has_class('debug-call-stack')}]//*[{has_class('monaco-list-row')}]"
    thread = f"{rows}[.//*[{has_class('thread')}][starts-with(normalize-space(), '{actor} {rank} ·')]]"
    return page.locator(f"xpath={rows}[@data-index = {thread}/@data-index + 1]")


def has_class(name: str) -> str:
    """XPath's test that an element has the class `name`."""
    return f"contains(concat(' ', normalize-space(@class), ' '), ' {name} ')"


def variable(page: Page, view: str, name: str):
    """The value shown for `name` in the Variables or Watch view (`view`: `variables`, `watch`);
    VS Code shows the name as `name =`."""
    row = page.locator(f".debug-{view} .monaco-list-row", has=page.locator(".name", has_text=re.compile(rf"^{re.escape(name)}( =)?$")))
    return row.locator(".value").first
