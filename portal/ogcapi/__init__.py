"""OGC API - Processes over the portal's catalogue and runs."""
