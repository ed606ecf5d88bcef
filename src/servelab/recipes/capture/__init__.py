"""InferenceX's launch scripts run under bash with stub servers: what each runs for one job.

InferenceX keeps a deployment's server flags in shell scripts (`benchmarks/single_node/...sh`) with branches
on layout and concurrency, so servelab does not parse them: it runs a script in a sandbox (sandbox.py) where
the server commands are stubs that record their argv, environment and the files the argv names
(stub_server.py), and InferenceX's benchmark_lib.sh is a stub (benchmark_lib.sh) in which nothing waits or
benchmarks. From what a script ran, extras.py takes what it adds to servelab's adapter rendering (a launch
profile's `Extras`).

Two users: scripts/ix_launch.py captures the pinned scripts into the shipped launch profiles, and the sweep
(recipes/checkout_launch.py) derives a job's launch from the user's own checkout when its script differs from
the one the shipped profile was captured from, cached by script hash (cache.py).
"""
