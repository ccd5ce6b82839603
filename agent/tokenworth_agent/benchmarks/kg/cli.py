"""``tokenworth kg serve`` / ``kg stop``: a local Freebase SPARQL endpoint (Virtuoso 7.2.5) for the KG stream.

The KG benchmark's own commands (:attr:`~tokenworth_agent.benchmarks.base.Benchmark.commands`): the CLI adds them
under the benchmark's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def commands() -> typer.Typer:
    return kg_app


kg_app = typer.Typer(add_completion=False, help="A local Freebase SPARQL endpoint (Virtuoso 7.2.5) for the KG stream.")


@kg_app.command("serve")
def kg_serve(
    dump: Path = typer.Option(..., help="Freebase RDF: a .nt, .nt.gz, .ttl or .ttl.gz file, or a folder of them."),
    port: int = typer.Option(8890, help="SPARQL/HTTP port on 127.0.0.1."),
    folder: Path = typer.Option(Path("kg-virtuoso"), "--dir", help="Database folder (reused: loaded once)."),
    isql_port: Optional[int] = typer.Option(None, help="Virtuoso's ISQL port.", show_default="port + 10000"),
    memory: Optional[float] = typer.Option(None, help="Buffer pool in GiB.", show_default="15% of RAM"),
    foreground: bool = typer.Option(False, "--foreground", help="Stay attached; Ctrl-C stops the server."),
) -> None:
    """Load a Freebase dump into Virtuoso once and serve it (in the background) for --kg-endpoint."""
    import time

    from tokenworth_agent.benchmarks.kg.virtuoso import VirtuosoError, serve

    try:
        served = serve(dump, folder, port=port, isql_port=isql_port,
                       memory_mb=None if memory is None else max(64, int(memory * 1024)), echo=typer.echo)
    except VirtuosoError as exc:
        fail(str(exc))
    if served.already_running:
        typer.echo(f"already serving {served.folder} (loaded before; not reloaded)")
    else:
        loaded = f"loaded in {served.load_seconds:.1f} s" if served.loaded_now else "already loaded, not reloaded"
        typer.echo(f"Virtuoso started in {served.start_seconds:.1f} s on {served.folder} ({loaded})")
    typer.echo(f"endpoint: --kg-endpoint {served.url}")
    if not foreground:
        typer.echo(f"stop it with: tokenworth kg stop --dir {served.folder}")
        return
    typer.echo("serving in the foreground; Ctrl-C stops the server")
    try:
        while served.server.running():
            time.sleep(1.0)
        fail(f"Virtuoso exited: {served.server.log_tail()}", 1)
    except KeyboardInterrupt:
        served.server.stop()
        typer.echo("stopped")


@kg_app.command("stop")
def kg_stop(folder: Path = typer.Option(Path("kg-virtuoso"), "--dir", help="The folder given to kg serve.")) -> None:
    """Stop the Virtuoso server of a folder (the database stays; kg serve restarts it without reloading)."""
    from tokenworth_agent.benchmarks.kg.virtuoso import VirtuosoError, stop_folder

    try:
        stopped = stop_folder(folder)
    except VirtuosoError as exc:
        fail(str(exc))
    typer.echo(f"stopped the server of {folder}" if stopped else f"no server was running for {folder}")



__all__ = ["commands", "kg_app"]
