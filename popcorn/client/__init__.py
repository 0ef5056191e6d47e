"""Leaderboard client: the KernelBot HTTP API (api, sse) and its results as tables and evidence (results)."""
