"""Processes read or joined from outside: `join`, `join --wake` and `stacks` with no broker."""
