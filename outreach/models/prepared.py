"""One row and its related rows by primary key, its SQL compiled once per process: the jobs' load.

Every generation and send job starts by loading its outreach with its lead, organization and
owner (select_related). The ORM compiles that query again on every call, and compiling it (the
columns of four tables) cost more of a worker's CPU than anything else on the row's path:
about 2.5 ms of a send's 12.6 and of a generation's 19 (py-spy --gil at 3,000 requests/min,
2026-11-27). `PreparedGet` compiles it the first time, then runs the SQL with the primary key
and builds the instances as Django's own ModelIterable does (the same `from_db` and related
populators), so what it returns is what `queryset.get(pk=...)` returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, router
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]

M = TypeVar("M", bound=Model)

# Stands for the primary key while compiling; found once in the compiled parameters, then
# replaced by the real one on each call.
_PK = -987_654_321


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]  # with _PK where the primary key goes
    converters: dict[int, Any]
    start: int
    end: int
    init_list: list[str]
    related: list[Any]


class PreparedGet(Generic[M]):
    """`queryset().get(pk=pk)`, compiled once: `queryset` builds the query (select_related, only,
    no other filter); the primary key is the one parameter that changes."""

    def __init__(self, queryset: Callable[[], QuerySet[M]]) -> None:
        self._queryset = queryset
        self._model: type[M] | None = None  # the queryset's, known once it was built
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def get(self, pk: int) -> M:
        model = self._model or self._model_known()
        db = router.db_for_read(model)
        compiled = self._compiled.get(db) or self._compile(db)
        params = [pk if p == _PK else p for p in compiled.params]
        connection = connections[db]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            found = cursor.fetchone()
        if found is None:
            raise model.DoesNotExist(  # type: ignore[attr-defined]
                f"{model._meta.object_name} matching query does not exist."
            )
        row = list(found)
        for position, (converters, expression) in compiled.converters.items():
            for converter in converters:  # as SQLCompiler.apply_converters, on this thread's connection
                row[position] = converter(row[position], expression, connection)
        obj = model.from_db(db, compiled.init_list, row[compiled.start : compiled.end])
        for populator in compiled.related:
            populator.populate(row, obj)
        return obj

    def _model_known(self) -> type[M]:
        self._model = self._queryset().model
        return self._model

    def _compile(self, db: str) -> _Compiled:
        with self._lock:
            if db in self._compiled:
                return self._compiled[db]
            query = self._queryset().filter(pk=_PK).query
            compiler = query.get_compiler(using=db)
            sql, params = compiler.as_sql()
            if list(params).count(_PK) != 1:
                raise ValueError(f"the query must take the primary key as its one filter: {params!r}")
            select, klass_info = compiler.select, compiler.klass_info
            if klass_info is None or compiler.annotation_col_map:
                raise ValueError("the query must load model instances, without annotations")
            start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
            compiled = _Compiled(
                sql=sql,
                params=tuple(params),
                converters=compiler.get_converters([s[0] for s in select[: compiler.col_count]]),
                start=start,
                end=end,
                init_list=[s[0].target.attname for s in select[start:end]],
                related=get_related_populators(klass_info, select, db),
            )
            self._compiled[db] = compiled
            return compiled
