"""The one-command demo: seeds a demo organization, runs every process, shows live progress,
and (with --for) writes a report. `python manage.py demo` is the entry point."""
