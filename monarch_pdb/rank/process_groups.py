"""What this process's torch.distributed process groups last did, read without stopping the
rank: the shell's `collectives` evaluates `snapshot()` in each rank as `peek` does.

Where the job enabled torch's Flight Recorder (`TORCH_FR_BUFFER_SIZE` for gloo and the CPU,
`TORCH_NCCL_TRACE_BUFFER_SIZE` for NCCL), each group's last collective is named: its operation,
sequence number, sizes and state, and when it was enqueued. Otherwise each group's sequence
number alone, which counts the collectives the rank entered, tells who is behind. Each group
names its members (torch's global ranks, as compact text) so that the shell can name those that
did not answer.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from monarch_pdb.rank.sources import program_code
from monarch_pdb.ranks import format_ranks

NO_TORCH = "torch.distributed has no process group in this process"


def snapshot() -> str:
    """This process's groups, and where its main thread is, as compact JSON."""
    return json.dumps({"at": _where(), **_groups()}, separators=(",", ":"))


def _groups() -> dict[str, Any]:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return {"error": NO_TORCH}
    recorded = _flight_recorder()
    groups = []
    for group, name in dist.distributed_c10d._world.pg_names.items():
        entry: dict[str, Any] = {"name": name, "size": group.size()}
        entry["ranks"] = format_ranks(dist.get_process_group_ranks(group))
        if group is dist.group.WORLD:
            entry["desc"] = "world"
        try:
            entry["entered"] = group._get_sequence_number_for_group()
        except RuntimeError:
            continue  # a group this rank is not part of
        pg_id = str(getattr(group, "group_name", name))
        entry.update(recorded.get(pg_id, {}) or recorded.get(name, {}))
        groups.append(entry)
    return {"groups": groups, "recorded": bool(recorded)}


def _flight_recorder() -> dict[str, dict[str, Any]]:
    """Each group's last collective as torch's Flight Recorder has it, by group id and name;
    nothing where the job did not enable it."""
    try:
        from torch._C import _distributed_c10d as c10d

        dumped = json.loads(c10d._dump_fr_trace_json())
    except Exception:
        return {}
    found: dict[str, dict[str, Any]] = {}
    for pg_id, status in (dumped.get("pg_status") or {}).items():
        found[pg_id] = {
            "enqueued": int(status.get("last_enqueued_collective", -1)),
            "started": int(status.get("last_started_collective", -1)),
            "completed": int(status.get("last_completed_collective", -1)),
        }
    now = time.time_ns()
    for entry in dumped.get("entries") or []:
        if entry.get("is_p2p"):
            continue
        pg_id, name = (entry.get("process_group") or ["", ""])[:2]
        last = {
            "seq": entry.get("collective_seq_id"),
            "op": str(entry.get("profiling_name", "")).partition(":")[2] or entry.get("profiling_name", ""),
            "sizes": entry.get("input_sizes", []),
            "state": entry.get("state", ""),
            "age": round((now - entry.get("time_created_ns", now)) / 1e9, 1),
        }
        for key in (str(pg_id), str(name)):
            found.setdefault(key, {})["last"] = last
    return found


def _where() -> str:
    """The main thread's innermost frame of the program's own code, `file:line function`."""
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None and not program_code(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return ""
    return f"{frame.f_code.co_filename.rsplit('/', 1)[-1]}:{frame.f_lineno} {frame.f_code.co_name}"
