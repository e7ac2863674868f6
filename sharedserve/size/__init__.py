"""Fleet sizing: model profiles from ``bench`` reports, packing them onto GPUs, cost, plans."""
