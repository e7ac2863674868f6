"""Load benchmarks (``sharedserve bench``): sweep packing density, measure, report, recommend.

Importing this package does no work; in particular it imports no locust (only the load
generator, ``loadgen``, does, in a process of its own, because ``import locust`` monkey-patches
the whole process with gevent).
"""
