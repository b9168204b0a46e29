"""`field__any=[...]`: membership in a list sent as one array parameter.

`id__in=ids` writes one placeholder per id, and psycopg 3 splits and binds the statement's
placeholders in Python: at a dispatch cycle's hundreds to thousands of ids that cost tens of
milliseconds a statement (bench/dispatch.py, profiled). `id__any=ids` is `"id" = ANY(%s)` on
PostgreSQL, one parameter whatever the number of ids, and the statement's text is the same
for any list (one plan, one shape in tests/orchestrator/dispatch/test_cycle_queries.py).
SQLite (the demo) has no arrays: there it is `IN`, as `__in` writes it.
"""

from __future__ import annotations

from typing import Any

from django.db.models import ForeignKey, IntegerField, Lookup
from django.db.models.lookups import In


@ForeignKey.register_lookup
@IntegerField.register_lookup
class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_db_prep_lookup(self, value: Any, connection: Any) -> tuple[str, list[Any]]:
        return "%s", [[int(v) for v in value]]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        if connection.vendor != "postgresql":
            sql, params = In(self.lhs, list(self.rhs)).as_sql(compiler, connection)
            return sql, list(params)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", [*lhs_params, *rhs_params]
