# make test: the CI command (ruff, mypy, migrations check, the whole pytest suite, quick fault variants included).
# make chaos: the fault suite's long variants (a minute-long provider outage, more outreach); see docs/reliability.md.
.PHONY: test chaos faults

test:
	bash scripts/test.sh

chaos:
	CHAOS=1 .venv/bin/pytest tests/faults -v

faults:
	.venv/bin/pytest tests/faults -v
