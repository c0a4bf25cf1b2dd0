"""The session the shell holds (attached to one rank), and one it left while lines typed for it
may still wait."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Left:
    """A session the shell left while lines typed for it may still wait to run."""

    session: str
    """The session and why it was left: `debugee 3 (host), whose session ended`."""
    prompt: str
    """Its pdb prompt, which the lines typed for it are shown after."""


@dataclass
class Attachment:
    session: int
    job: str
    actor: str
    rank: int
    host: str
    paused: bool
    prompt: str

    @property
    def label(self) -> str:
        return f"{self.actor} {self.rank} ({self.host})"

    def describe(self) -> dict:
        return {"job": self.job, "actor": self.actor, "rank": self.rank, "host": self.host}
