"""The editor's side: `monarch-pdb dap`, the Debug Adapter Protocol over the broker."""
