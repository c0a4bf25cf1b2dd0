"""The clients of the broker: the shell and its scripts, the editor adapter, the notebook magics."""
