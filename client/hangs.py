"""The shell's commands for a job that hangs, which look at the whole job at once and stop
nothing unasked: `hang`, `stacks`, `peek`, `collectives`, `interrupt` and `mesh`. They reach
the shell through the narrow `Shell` it offers them, never its prompt or its sessions.
"""

from __future__ import annotations

import argparse
import functools
import json
import time
from collections.abc import Callable
from typing import Protocol, TextIO, cast

import cmd2
from monarch_pdb.client import answers, collectives, hang_report, mesh, stack_samples, stack_tree
from monarch_pdb.client.arguments import (
    ACTOR_HELP,
    SELECTOR_HELP,
    CommandError,
    argument,
    ask,
    command,
    every,
    frames_up,
    parse_target,
    samples,
    split_job,
    threads,
    timeout,
    typed_from_actor,
    usage,
    words_target,
)
from monarch_pdb.client.connection import RequestFailed, ShellConnection
from monarch_pdb.client.reporter import Reporter
from monarch_pdb.client.terminal import Terminal

from monarch_pdb import wire
from monarch_pdb.ranks import Selection, counted, format_ranks, parse_selector, render_selector

INTERRUPT_TIMEOUT = 5.0
HANG_SAMPLES = 3
HANG_EVERY = 0.5
"""`hang` takes three samples of the stacks this far apart: enough to tell ranks that move."""
PEEK_TIMEOUT = 5.0
RANK_ANSWERS_WITHIN = argument(
    "--timeout",
    type=timeout,
    default=PEEK_TIMEOUT,
    metavar="S",
    help=f"seconds a rank may take to answer (default {PEEK_TIMEOUT:g})",
)
"""The time limit of a command that reads running ranks as `peek` does."""


class Shell(Protocol):
    """What these commands use of the shell."""

    conn: ShellConnection
    report: Reporter
    actors: set[str]
    """The actor names Tab completes."""
    cast_timeout: float
    cast_output: str
    stdout: TextIO
    terminal: Terminal

    def fail(self, text: str) -> None: ...

    def complete_actor(self, text: str, line: str, begidx: int, endidx: int) -> list[str]: ...


def in_call_line(actor: str, in_call: list[int], place: str, holds_gil: bool) -> str:
    """What to do about ranks that an interrupt cannot stop before their call returns: `peek`
    reads them meanwhile, unless their call holds the GIL, which leaves only `stacks`."""
    one = len(in_call) == 1
    them = "it" if one else "them"
    now = f"only `stacks` reads {them} until then" if holds_gil else f"`peek` reads {them} now"
    return (
        f"{actor} ranks[{format_ranks(in_call)}] {'is' if one else 'are'} in a C call ({place})"
        f"{' that holds the GIL' if holds_gil else ''}; {'it stops' if one else 'they stop'} when it returns; {now}"
    )


def expression_only(text: str) -> str:
    """The expression, or the one line that says why it is not one: `peek` changes nothing in
    a rank, so a statement is refused before it is sent."""
    try:
        compile(text, "<peek>", "eval")
        return text
    except SyntaxError as error:
        try:
            compile(text, "<peek>", "exec")
        except SyntaxError:
            raise CommandError(f"peek needs a Python expression: {error.msg} in {text!r}") from None
    raise CommandError(f"peek evaluates an expression, not a statement ({text!r}): it assigns nothing in the ranks")


def peek_target(typed: str, usage_line: str) -> tuple[str, str, Selection, str]:
    """The target and expression of a peek, from what was typed from the actor's name on: the
    expression as typed, checked to be one."""
    job, actor, selection, expression = parse_target(typed, usage_line)
    if selection is None or not expression.strip():
        raise CommandError(usage_line)
    return job, actor, selection, expression_only(expression.strip())


def running_actors(shell: Shell) -> list[tuple[str, str]]:
    """Every (job, actor) with a rank neither lost nor finished: what `stacks` and `hang`
    look at when no actor is named."""
    rows = ask(shell.conn, wire.ListAll(), wire.SessionList).rows
    found = sorted({(r.job, r.actor) for r in rows if r.state not in (wire.RankState.LOST, wire.RankState.FINISHED)})
    if not found:
        raise CommandError("no running rank is known to the broker")
    return found


def sampled(count: int, every_s: float, take: Callable[[], wire.StacksResult]) -> list[wire.StacksResult]:
    """`count` stacks, `every_s` seconds apart; only the first where it read no rank at all (no
    reader, or every rank silent), since more samples of nothing tell nothing and cost seconds."""
    results = []
    for sample in range(count):
        if sample:
            time.sleep(every_s)  # the samples' pace, which the user chose
        results.append(take())
        if not results[-1].groups:
            break
    return results


class HangCommands(cmd2.CommandSet):
    """A cmd2 command set, so that these commands live apart from the shell's loop and sessions;
    cmd2 lists and runs them as the shell's own."""

    @property
    def shell(self) -> Shell:
        return cast(Shell, self._cmd)

    def fail(self, text: str) -> None:
        self.shell.fail(text)

    def complete_actor(self, text: str, line: str, begidx: int, endidx: int) -> list[str]:
        return self.shell.complete_actor(text, line, begidx, endidx)

    @command(
        argument("actor", nargs="?", help=ACTOR_HELP + " (default: every running actor)"),
        argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)"),
        argument(
            "--thread",
            type=threads,
            default=wire.Threads.MAIN,
            metavar="main|all",
            help="the main thread of each rank (default), or all its threads",
        ),
        argument(
            "--full",
            action="store_true",
            help="every frame, the trunk all ranks share too (folded into one line by default)",
        ),
        argument(
            "--locals",
            action="store_true",
            help="the locals of each group's program frame (the one peek reads), values folded over ranks",
        ),
        argument(
            "--native",
            action="store_true",
            help="the C/C++ frames too, read from outside each process by its host's broker (py-spy)",
        ),
        argument(
            "--samples",
            type=samples,
            default=1,
            metavar="N",
            help="take N merged samples and tell which ranks moved between them (default 1)",
        ),
        argument("--every", type=every, default=1.0, metavar="S", help="seconds between samples (default 1)"),
        argument(
            "--timeout",
            type=timeout,
            default=None,
            metavar="S",
            help="seconds the ranks get to answer, or their host's broker to read them from outside "
            "(default: cast_timeout)",
        ),
        argument(
            "--by",
            default="",
            metavar="EXPR",
            help="order the groups by EXPR read from each rank (as peek reads it), least first",
        ),
        argument("--json", action="store_true", help="the merged stacks as JSON"),
    )
    def do_stacks(self, args: argparse.Namespace) -> None:
        """stacks [actor] [ranks(<ranks>)] [--thread main|all] [--full] [--locals] [--native] [--samples N [--every S]] [--timeout S] [--by EXPR] [--json]

        Merged Python stacks of running ranks, without stopping them. A rank whose agent does
        not answer (C code holding the GIL) is read from outside its process; --native reads
        every rank so, its C/C++ frames (a NCCL or gloo wait) among its Python ones. --samples
        takes N samples S seconds apart and tells the ranks that moved from those that stood
        still, and where; --by orders the groups by a value of each rank's (`step`), least
        progressed first. --timeout S gives the ranks, and the reads from outside, S seconds
        (default cast_timeout)."""
        shell = self.shell
        if args.actor is not None:
            job, actor, selection, extra = words_target(args.actor, args.selector, usage(self.do_stacks))
            if extra:
                raise CommandError(f"stacks takes an actor and a selector, not {extra!r}")
            targets = [(job, actor)]
        else:
            selection = None
            targets = running_actors(shell)
        selector = render_selector(selection or parse_selector("ranks(:)"))
        by = expression_only(args.by) if args.by else ""
        texts, docs = [], []
        for job, actor in targets:
            results = sampled(
                args.samples,
                args.every,
                functools.partial(
                    shell.conn.stacks,
                    actor,
                    selector,
                    args.thread,
                    args.timeout or shell.cast_timeout,
                    job,
                    args.locals,
                    args.native,
                ),
            )
            result = results[-1]
            texts.append(stack_tree.text(result, args.thread == wire.Threads.ALL, args.full))
            docs.append(stack_tree.document(result, args.thread == wire.Threads.ALL, args.full))
            if args.samples > 1:
                moves = stack_samples.motion(results, args.every)
                texts.append("\n".join(stack_samples.motion_lines(actor, moves)) + "\n")
                docs[-1]["motion"] = stack_samples.motion_document(moves)
            if by:
                values = shell.conn.peek(actor, selector, by, PEEK_TIMEOUT, job=job)
                ordered = stack_samples.by_value(result, values)
                texts.append("\n".join(stack_samples.by_lines(actor, by, ordered)) + "\n")
                docs[-1]["by"] = stack_samples.by_document(by, ordered)
            if result.missing:
                shell.report.failed(f"{counted(len(result.missing), 'rank')} of {actor} sent no stack")
        doc = docs[0] if len(docs) == 1 else docs
        shell.report.result(json.dumps(doc, sort_keys=True) if args.json else "".join(texts), doc)

    complete_stacks = complete_actor

    @command(
        argument("--frame", dest="function", default="", metavar="FUNC", help="the innermost frame of FUNC"),
        argument("--up", type=frames_up, default=0, metavar="N", help="that many frames further out"),
        RANK_ANSWERS_WITHIN,
        argument("--json", action="store_true", help="the grouped answers as JSON"),
        argument("actor", help=ACTOR_HELP),
        argument(
            "expression",
            nargs=argparse.REMAINDER,
            metavar="ranks(<ranks>) <expression>",
            help=SELECTOR_HELP + ", then the expression, sent as typed",
        ),
        names_options=True,
    )
    def do_peek(self, args: argparse.Namespace) -> None:
        """peek [--frame FUNC | --up N] [--timeout S] [--json] <actor> ranks(<ranks>) <expression>

        Evaluate a Python expression in running ranks without stopping them, and show the
        answers grouped as a cast's. It is read in the frame of the program's own code where
        `stacks` shows each rank (a paused rank: where it stopped); --frame FUNC the innermost
        frame of FUNC, --up N that many frames further out. An expression only, not a statement
        (what it calls runs in the rank: `mcp` without --allow-control refuses calls). One still running after --timeout seconds (default 5) is answered as
        such and finishes on its own; a rank whose C code holds the GIL is named."""
        shell = self.shell
        job, actor, selection, expression = peek_target(typed_from_actor(args, args.expression), usage(self.do_peek))
        result = shell.conn.peek(
            actor, render_selector(selection), expression, args.timeout, args.function, args.up, job
        )
        shell.actors.add(actor)

        def document() -> dict:
            doc = answers.document(result)
            for group in doc["groups"]:
                del group["outcome"]  # the ranks of a peek run on: no session's outcome to tell
            return doc

        render = answers.raw if shell.cast_output == "raw" else answers.grouped
        text = (lambda: json.dumps(document(), sort_keys=True)) if args.json else functools.partial(render, result)
        shell.report.result(text, document)
        if result.missing:
            shell.report.failed(f"{len(result.missing)} of the selected ranks did not answer")

    complete_peek = complete_actor

    @command(
        argument("actor", help=ACTOR_HELP),
        argument("selector", nargs="*", metavar="ranks(<ranks>)", help=SELECTOR_HELP + " (default: all)"),
        RANK_ANSWERS_WITHIN,
        argument("--json", action="store_true", help="the groups and their ranks as JSON"),
    )
    def do_collectives(self, args: argparse.Namespace) -> None:
        """collectives <actor> [ranks(<ranks>)] [--timeout S] [--json]

        What each rank's torch.distributed process groups last did, read without stopping
        the ranks, folded over ranks: per group, the first collective the ranks disagree on and
        the ranks that never entered it, then where each set of ranks stands (the last
        collective's operation, sizes and state where the job enabled torch's Flight Recorder)."""
        shell = self.shell
        job, actor, selection, extra = words_target(args.actor, args.selector, usage(self.do_collectives))
        if extra:
            raise CommandError(f"collectives takes an actor and a selector, not {extra!r}")
        selector = render_selector(selection or parse_selector("ranks(:)"))
        result = shell.conn.peek(actor, selector, collectives.EXPRESSION, args.timeout, job=job)
        shell.actors.add(actor)
        report = collectives.fold(result, selection)
        doc = collectives.document(report)
        shell.report.result(json.dumps(doc, sort_keys=True) if args.json else collectives.text(report), doc)
        if result.missing:
            shell.report.failed(f"{len(result.missing)} of the selected ranks did not answer")

    complete_collectives = complete_actor

    @command(
        argument("actor", nargs="?", help=ACTOR_HELP + " (default: every running actor)"),
        argument("--json", action="store_true", help="the whole story as JSON"),
    )
    def do_hang(self, args: argparse.Namespace) -> None:
        """hang [actor] [--json]

        The whole story of a job that hangs, on one screen, stopping nothing: where the ranks
        are (their stacks, three samples half a second apart), the collective they disagree on and
        who never entered it, the least progressed ranks, and the commands to type next."""
        shell = self.shell
        targets = [split_job(args.actor)] if args.actor is not None else running_actors(shell)
        texts, docs = [], []
        for job, actor in targets:
            samples = sampled(
                HANG_SAMPLES,
                HANG_EVERY,
                functools.partial(shell.conn.stacks, actor, "ranks(:)", wire.Threads.MAIN, shell.cast_timeout, job),
            )
            snapshots = shell.conn.peek(actor, "ranks(:)", collectives.EXPRESSION, PEEK_TIMEOUT, job=job)
            story = hang_report.fold(actor, samples, HANG_EVERY, snapshots)
            texts.append(hang_report.text(story))
            docs.append(hang_report.document(story))
            shell.actors.add(actor)
        doc = docs[0] if len(docs) == 1 else docs
        shell.report.result(json.dumps(doc, sort_keys=True) if args.json else "\n".join(texts), doc)

    complete_hang = complete_actor

    @command(
        argument("actor", help=ACTOR_HELP),
        argument("selector", nargs="+", metavar="ranks(<ranks>)", help=SELECTOR_HELP),
        argument(
            "--timeout",
            type=timeout,
            default=INTERRUPT_TIMEOUT,
            metavar="S",
            help=f"seconds to wait for them to stop (default {INTERRUPT_TIMEOUT:g})",
        ),
    )
    def do_interrupt(self, args: argparse.Namespace) -> None:
        """interrupt <actor> ranks(<ranks>) [--timeout S]

        Stop running ranks where they are, as sessions."""
        shell = self.shell
        usage_line = usage(self.do_interrupt)
        job, actor, selection, extra = words_target(args.actor, args.selector, usage_line)
        if extra:
            raise CommandError(usage_line)
        assert selection is not None
        reply = ask(
            shell.conn, wire.Interrupt(actor=actor, selector=render_selector(selection), job=job), wire.Interrupting
        )
        asked = set(reply.ranks)

        def stopped(rows: list[wire.SessionRow]) -> set[int]:
            return {r.rank for r in rows if r.job == reply.job and r.actor == actor} & asked

        done = stopped(shell.conn.wait_for_rows(lambda rows: stopped(rows) == asked, args.timeout)) if asked else set()
        stuck = sorted(asked - done)
        lines = [
            f"Interrupted {counted(len(done), 'rank')}" + (f": {answers.rank_set(actor, sorted(done))}" if done else "")
        ]
        if not asked:
            lines = [f"Every selected rank of {actor} is already stopped."]
        doc: dict = {"interrupted": {"job": reply.job, "actor": actor, "ranks": sorted(done)}, "not_stopped": stuck}
        if stuck:
            lines.append(
                f"{answers.rank_set(actor, stuck)} did not stop within {args.timeout:g} s (blocked in a call that "
                "did not return to its code, C code holding the GIL, or the signal blocked); where they are:"
            )
            try:
                where = shell.conn.stacks(
                    actor, f"ranks({','.join(map(str, stuck))})", wire.Threads.MAIN, shell.cast_timeout, reply.job
                )
                lines.append(stack_tree.text(where, False).rstrip("\n"))
                doc["stacks"] = stack_tree.document(where)
                lines += [in_call_line(actor, *found) for found in stack_tree.in_calls(where)]
            except RequestFailed as failure:
                lines.append(f"(no stacks: {failure})")
            shell.report.failed(f"{counted(len(stuck), 'rank')} did not stop")
        shell.actors.add(actor)
        shell.report.result("\n".join(lines), doc)

    complete_interrupt = complete_actor

    @command(argument("actor", nargs="?", help=ACTOR_HELP + " (default: every actor)"))
    def do_mesh(self, args: argparse.Namespace) -> None:
        """mesh [actor]

        A picture of the mesh, each rank's state in its cell."""
        shell = self.shell
        job, actor = split_job(args.actor) if args.actor is not None else ("", "")
        rows = ask(shell.conn, wire.ListAll(), wire.SessionList).rows
        by_actor: dict[tuple[str, str], list[wire.SessionRow]] = {}
        for row in rows:
            if (not actor or row.actor == actor) and (not job or row.job == job):
                by_actor.setdefault((row.job, row.actor), []).append(row)
        if not by_actor:
            raise CommandError(
                f"No rank of actor {actor} is known to the broker" if actor else "No rank is known to the broker"
            )
        several_jobs = len({j for j, _ in by_actor}) > 1
        colour = shell.stdout.isatty() and not shell.report.as_json
        names = {key: f"{key[0]}:{key[1]}" if several_jobs else key[1] for key in by_actor}
        columns = shell.terminal.size().columns
        pictures = [mesh.picture(names[key], by_actor[key], colour, columns) for key in sorted(by_actor)]
        docs = [mesh.document(names[key], by_actor[key]) for key in sorted(by_actor)]
        shell.report.result("\n".join(pictures), docs[0] if len(docs) == 1 else docs, colour)
