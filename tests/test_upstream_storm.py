"""A broker below that tells its parent of a storm of stops, longer than its parent may stay
silent, stays registered once: no rank's stop is announced twice at the root."""

from __future__ import annotations

import re
import secrets
import textwrap
import threading

import pytest
from programs import Program, settings_for, start_broker, stop_broker, wait_for_sessions

from monarch_pdb import wire
from monarch_pdb.client.connection import ShellConnection

RANKS = 40
STORM = textwrap.dedent('''
    import sys
    import threading
    import time

    import monarch_pdb


    def rank_main(rank):
        time.sleep(rank * 0.05)  # a stop every 50 ms, for two seconds
        with monarch_pdb.endpoint_call("storm", rank, {"rank": rank}):
            breakpoint()


    monarch_pdb.install()
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(int(sys.argv[1]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
''')


@pytest.mark.timeout(60)
def test_a_storm_longer_than_the_parents_silence_limit_announces_each_stop_once(env, tmp_path):
    secret = {"MONARCH_PDB_SECRET": secrets.token_hex(32), "MONARCH_PDB_HEARTBEAT": "0.2"}
    root_env = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "root"), **secret)
    host_env = dict(env, MONARCH_PDB_RUNTIME_DIR=str(tmp_path / "host"), **secret)
    root, first = start_broker(root_env)
    port = re.search(r"tcp://127\.0\.0\.1:(\d+)", first).group(1)
    # The host takes its parent for gone after half a second of hearing nothing.
    host, _ = start_broker(dict(host_env, MONARCH_PDB_CONNECT_TIMEOUT="0.5"), "--upstream", f"127.0.0.1:{port}")
    events: list[wire.Event] = []
    host_gone = threading.Event()

    def seen(batch: list[wire.Event]) -> None:
        events.extend(batch)
        if any(e.kind == wire.EventKind.BROKER_LOST for e in batch):
            host_gone.set()

    conn = ShellConnection.open(settings_for(root_env), on_events=seen)
    script = tmp_path / "storm.py"
    script.write_text(STORM)
    program = Program(host_env, script, str(RANKS), cwd=tmp_path)
    try:
        wait_for_sessions(root_env, RANKS)
        host_log = stop_broker(host)
        assert host_gone.wait(10), events  # every event before it has come
        stops = sorted(e.rank for e in events if e.kind == wire.EventKind.BREAKPOINT)
        assert stops == list(range(RANKS)), stops
        assert host_log.count("registered with the broker above") == 1, host_log
    finally:
        conn.close()
        program.stop()
        if host.poll() is None:
            stop_broker(host)
        stop_broker(root)
