"""A query the jobs run on every outreach, its SQL compiled once per process.

Every generation and send job starts by loading its outreach with its lead, organization and
owner (select_related). The ORM compiles that query again on every call, and compiling it (the
columns of four tables) cost more of a worker's CPU than anything else on the row's path:
about 2.5 ms of a send's 12.6 and of a generation's 19 (py-spy --gil at 3,000 requests/min,
2026-11-27). The same held, smaller, for the few other fixed-shape reads a job makes (the
thread of earlier emails, the owner's mailboxes). `Prepared` compiles such a query the first
time, then runs its SQL with the call's values and builds the instances as Django's own
ModelIterable does (the same `from_db` and related populators), so what it returns is what
the queryset returns.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, router
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators  # type: ignore[attr-defined]

M = TypeVar("M", bound=Model)

# Stand for the parameters while compiling (the first for the first parameter, and so on);
# each is found once in the compiled parameters, then replaced by the call's value.
_SENTINEL = -987_654_321


@dataclass(frozen=True)
class _Compiled:
    sql: str
    params: tuple[Any, ...]
    slots: dict[int, str]  # position in params -> the parameter's name
    converters: dict[int, Any]
    start: int
    end: int
    init_list: list[str]
    related: list[Any]


class Prepared(Generic[M]):
    """`queryset(**values)`, compiled once. `queryset` builds the query from integer keyword
    parameters (ids), each used once as a filter value; it loads model instances (select_related
    and only allowed, no annotations). `get` returns the one row, `all` every row."""

    def __init__(self, queryset: Callable[..., QuerySet[M]]) -> None:
        self._queryset = queryset
        self._names = tuple(inspect.signature(queryset).parameters)
        self._model: type[M] | None = None  # the queryset's, known once it was built
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def get(self, **values: int) -> M:
        rows = self._run(values, one=True)
        if not rows:
            model = self._model_known()
            raise model.DoesNotExist(  # type: ignore[attr-defined]
                f"{model._meta.object_name} matching query does not exist."
            )
        return rows[0]

    def all(self, **values: int) -> list[M]:
        return self._run(values, one=False)

    def _run(self, values: dict[str, int], *, one: bool) -> list[M]:
        model = self._model or self._model_known()
        db = router.db_for_read(model)
        compiled = self._compiled.get(db) or self._compile(db)
        params = list(compiled.params)
        for position, name in compiled.slots.items():
            params[position] = values[name]
        connection = connections[db]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            found = [cursor.fetchone()] if one else cursor.fetchall()
        objects = []
        for fetched in found:
            if fetched is None:
                break
            row = list(fetched)
            for position, (converters, expression) in compiled.converters.items():
                for converter in converters:  # as SQLCompiler.apply_converters, on this thread's connection
                    row[position] = converter(row[position], expression, connection)
            obj = model.from_db(db, compiled.init_list, row[compiled.start : compiled.end])
            for populator in compiled.related:
                populator.populate(row, obj)
            objects.append(obj)
        return objects

    def _model_known(self) -> type[M]:
        self._model = self._queryset(**self._sentinels()).model
        return self._model

    def _sentinels(self) -> dict[str, int]:
        return {name: _SENTINEL - i for i, name in enumerate(self._names)}

    def _compile(self, db: str) -> _Compiled:
        with self._lock:
            if db in self._compiled:
                return self._compiled[db]
            sentinels = self._sentinels()
            compiler = self._queryset(**sentinels).query.get_compiler(using=db)
            sql, params = compiler.as_sql()
            params = tuple(params)
            slots = {}
            for name, sentinel in sentinels.items():
                if params.count(sentinel) != 1:
                    raise ValueError(f"parameter {name!r} must be used once as a filter value: {params!r}")
                slots[params.index(sentinel)] = name
            select, klass_info = compiler.select, compiler.klass_info
            if klass_info is None or compiler.annotation_col_map:
                raise ValueError("the query must load model instances, without annotations")
            start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
            compiled = _Compiled(
                sql=sql,
                params=params,
                slots=slots,
                converters=compiler.get_converters([s[0] for s in select[: compiler.col_count]]),
                start=start,
                end=end,
                init_list=[s[0].target.attname for s in select[start:end]],
                related=get_related_populators(klass_info, select, db),
            )
            self._compiled[db] = compiled
            return compiled
