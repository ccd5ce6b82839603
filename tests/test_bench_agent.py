"""The agent benchmark's aggregation over seeds (the runs themselves are tested in test_runner)."""

from tokenworth_bench.agent import aggregate, markdown


def test_aggregate_means_and_stds_over_seeds():
    s0 = [{"method": "standard", "sr": 40.0, "output_tok": 100.0, "delta_tok": 0.0},
          {"method": "tokenworth", "sr": 50.0, "output_tok": 90.0, "delta_tok": -0.10}]
    s1 = [{"method": "standard", "sr": 44.0, "output_tok": 110.0, "delta_tok": 0.0},
          {"method": "tokenworth", "sr": 54.0, "output_tok": 88.0, "delta_tok": -0.20}]
    rows = aggregate([s0, s1])
    tw = next(r for r in rows if r["method"] == "tokenworth")
    assert tw["sr"] == (52.0, 2.0) and tw["output_tok"] == (89.0, 1.0)
    assert abs(tw["delta_tok"][0] + 0.15) < 1e-12
    text = markdown({"db": rows}, "sim", [0, 1], None)
    assert "| tokenworth | 52.0 ± 2.0 | 89.0 ± 1.0 | -15.0% ± 5.0 |" in text
