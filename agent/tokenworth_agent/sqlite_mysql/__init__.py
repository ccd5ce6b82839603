"""MySQL behaviour on embedded SQLite, for the DB environment.

* ``transpile``: MySQL statements to SQLite via sqlglot AST transforms;
* ``functions``: MySQL functions/aggregates registered on the connection;
* ``types``: which results MySQL returns as DECIMAL (for ``Decimal('…')`` observations);
* ``errors``: MySQL-shaped error texts;
* ``limits``: the per-reply wall-clock budget and the size bounds;
* ``database``: the guarded in-memory database (authorizer, budget, derived tables, table hash).
"""

from .database import MySQLOnSQLite, table_md5
from .errors import MySQLError
from .limits import Deadline, Limits

__all__ = ["Deadline", "Limits", "MySQLError", "MySQLOnSQLite", "table_md5"]
