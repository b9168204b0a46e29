"""Development stand-ins, apart from the product: the LLM provider simulator (`llm_sim`), an
SMTP sink, an in-process LLM stub for tests, and the process group that starts a local stack
for the demo, the benchmarks and the tests. Production runs none of it."""
