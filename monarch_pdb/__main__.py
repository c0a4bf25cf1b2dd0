"""`python -m monarch_pdb ARGS`: `monarch-pdb ARGS` for a program that knows only its Python."""

import sys

from monarch_pdb.cli import main

sys.exit(main(sys.argv[1:]))
