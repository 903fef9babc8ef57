"""Traffic: the Schedule (pure), the baseline collectives (pure) and the host-side worker."""
