"""The rank side: the code that runs inside every rank process. `breakpoint()` reaches it through
`sys.breakpointhook` (`hooks.install`) or `PYTHONBREAKPOINT=monarch_pdb.set_trace`; nothing here
runs in the broker or the clients."""
