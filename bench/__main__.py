from bench.cli import app

app(prog_name="tokenworth-bench")
