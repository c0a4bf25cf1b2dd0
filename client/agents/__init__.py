"""Coding agents' side: `monarch-pdb mcp`, the Model Context Protocol over the command layer."""
