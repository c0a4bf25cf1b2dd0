"""`monarch-pdb web`: the live page, its state and news from the broker, drawn by a real browser
with nothing a rank sent run; off loopback, nobody without the secret gets in."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import pytest
from programs import HOSTILE_NAMES, debug, hostile_ranks, start_broker, stop_broker

from monarch_pdb.client.connection import RESTARTED

MONARCH_PDB = os.path.join(os.path.dirname(sys.executable), "monarch-pdb")
IMG, SCRIPT = HOSTILE_NAMES
CHROMIUM = shutil.which("chromium")

pytest.importorskip("starlette", reason="monarch-pdb web needs the web extra (make test installs it)")


@contextlib.contextmanager
def serving(env: dict[str, str], address: str):
    """`monarch-pdb web --listen ADDRESS`, and the base address it says it serves."""
    server = subprocess.Popen([MONARCH_PDB, "web", "--listen", address], env=env, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stderr.readline()
        assert line.startswith("monarch-pdb web: listening on http://"), line + server.stderr.read()
        yield line.rstrip().rpartition(" ")[2].replace("0.0.0.0", "127.0.0.1")
    finally:
        server.terminate()
        server.wait(timeout=30)
        server.stderr.close()


def get(url: str, headers: dict[str, str] | None = None) -> urllib.response.addinfourl:
    return urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60)


@pytest.mark.timeout(150)
def test_the_live_page_shows_the_job_reads_an_actor_and_tells_the_news(env, tmp_path):
    program = hostile_ranks(env, tmp_path)
    try:
        with serving(env, "127.0.0.1:0") as base:
            state = json.load(get(base + "state"))
            assert sorted((row["actor"], row["state"]) for row in state["ranks"]) == [
                (SCRIPT, "running"),
                (IMG, "breakpoint"),
            ]
            assert sorted(part["name"] for part in state["actors"]) == sorted([IMG, SCRIPT])
            read = json.load(get(base + "actor?name=" + urllib.parse.quote(SCRIPT)))
            assert f"actor = {SCRIPT!r}" in read["stacks"] and read["hang"].startswith(f"== {SCRIPT}: ")
            with pytest.raises(urllib.error.HTTPError) as unnamed:
                get(base + "actor")
            assert unnamed.value.code == 400

            if CHROMIUM is not None:
                drawn = subprocess.run(
                    [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--timeout=8000"] + ["--dump-dom", base],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert "<canvas" in drawn.stdout and "monarch-pdb: the job now" in drawn.stdout, drawn.stdout[:3000]
                assert "&lt;img src=x onerror=alert(1)&gt;" in drawn.stdout
                assert "<img" not in drawn.stdout and drawn.stdout.count("<script") == 2

            stream = get(base + "news")
            assert stream.headers["Content-Type"].startswith("text/event-stream")
            assert debug(env, "continue").returncode == 0
            told = ""
            while "data:" not in told:
                told += stream.readline().decode()
            assert IMG in json.loads(told.partition("data: ")[2]), told
            stream.close()
    finally:
        program.stop()


@pytest.mark.timeout(90)
def test_off_loopback_only_a_request_that_shows_the_secret_is_answered(env):
    env = dict(env, MONARCH_PDB_SECRET="the secret of this test")
    broker, _ = start_broker(env)
    try:
        with serving(env, "0.0.0.0:0") as base:
            for path in ("", "state", "news"):
                with pytest.raises(urllib.error.HTTPError) as refused:
                    get(base + path)
                assert refused.value.code == 401 and b"?token=" in refused.value.read()
            shown = {"Authorization": "Bearer the secret of this test"}
            assert json.load(get(base + "state", shown)) == {"actors": [], "jobs": [], "ranks": []}
            opener = urllib.request.build_opener(NoRedirect)
            with pytest.raises(urllib.error.HTTPError) as login:
                opener.open(base + "?token=" + urllib.parse.quote("the secret of this test"), timeout=30)
            assert login.value.code == 303
            cookie = login.value.headers["Set-Cookie"].partition(";")[0]
            assert "HttpOnly" in login.value.headers["Set-Cookie"]
            assert get(base, {"Cookie": cookie}).status == 200
            assert get(base + "state", {"Cookie": cookie}).status == 200
            with pytest.raises(urllib.error.HTTPError) as wrong:
                get(base + "?token=guessed")
            assert wrong.value.code == 401
    finally:
        stop_broker(broker)


@pytest.mark.timeout(120)
def test_a_page_left_open_through_a_broker_restart_is_told_and_served_again(env):
    broker, _ = start_broker(env)
    try:
        with serving(env, "127.0.0.1:0") as base:
            stream = get(base + "news")
            stop_broker(broker)
            broker, _ = start_broker(env)
            told = ""
            while "data:" not in told:
                told += stream.readline().decode()
            assert json.loads(told.partition("data: ")[2]) == RESTARTED
            stream.close()
            assert json.load(get(base + "state")) == {"actors": [], "jobs": [], "ranks": []}
    finally:
        stop_broker(broker)


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.mark.timeout(30)
def test_listening_beyond_loopback_needs_a_secret(env):
    done = subprocess.run([MONARCH_PDB, "web", "--listen", "0.0.0.0:0"], env=env, capture_output=True, text=True)
    assert done.returncode != 0
    assert done.stderr.strip() == (
        "monarch-pdb web: listening on 0.0.0.0, which is not loopback, needs a secret "
        "(MONARCH_PDB_SECRET or MONARCH_PDB_SECRET_FILE)"
    )
