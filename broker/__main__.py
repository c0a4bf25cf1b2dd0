"""`python -m monarch_pdb.broker`: how a rank starts an embedded broker in the background."""

import sys

from monarch_pdb.broker.main import main

sys.exit(main(sys.argv[1:]))
