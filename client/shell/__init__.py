"""The shell, at a terminal or over a script: `monarch-pdb debug`, cmd2 on GNU readline."""
