"""Which deployment runs each step of a job: placement within pools, fallbacks, and each
deployment's configuration-fault breaker (docs/architecture.md: LLM_DEPLOYMENTS).

placement.py is pure (rooms in, routes out); health.py keeps the breakers in Redis so the
dispatcher and every worker agree on them.
"""
