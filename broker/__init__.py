"""The broker: one hub per host that holds every paused session and routes shells to them."""
