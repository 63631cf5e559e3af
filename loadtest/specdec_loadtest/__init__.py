"""specdec_loadtest: load generator for the specdec router's streaming ``Generate`` RPC (or its
OpenAI-compatible HTTP front, ``--http``).

Closed-loop concurrency sweeps and open-loop Poisson arrivals over several decoding methods,
with TTFT / inter-token / end-to-end latency percentiles, throughput, speculative-decoding
statistics from the router's Summaries, optional /metrics deltas, RSS sampling and a KV-handle
leak check. Run ``python3 loadtest/specdec_loadtest --help``; see ``loadtest/README.md``.

Modules: ``stats`` (records, percentiles, metric definitions), ``schedule`` (seeded arrivals and
cancels), ``prompts`` (datasets), ``runner`` (the load itself, over the Python SDK or
``http_client``, the HTTP transport), ``prom`` (/metrics scraping), ``procwatch`` (RSS),
``report`` (table, results.json), ``plots`` (gnuplot), ``cli`` (the command line).
"""

__version__ = "0.1.0"
