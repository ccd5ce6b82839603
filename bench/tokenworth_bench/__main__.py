from tokenworth_bench.cli import app

app(prog_name="tokenworth-bench")
