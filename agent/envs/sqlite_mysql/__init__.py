"""MySQL behaviour on embedded SQLite, for the DB environment.

* ``transpile``: MySQL statements to SQLite via sqlglot AST transforms;
* ``functions``: MySQL functions/aggregates registered on the connection;
* ``types``: which results MySQL returns as DECIMAL (for ``Decimal('…')`` observations);
* ``errors``: MySQL-shaped error texts;
* ``database``: the guarded in-memory database (authorizer, time limit, table hash).
"""

from .database import MySQLOnSQLite, table_md5
from .errors import MySQLError

__all__ = ["MySQLError", "MySQLOnSQLite", "table_md5"]
