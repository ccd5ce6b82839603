"""Spec and HParams are validated on the host at construction: field, value and allowed range."""

from __future__ import annotations

import numpy as np
import pytest

import tokenworth_jax as tw

BAD_HPARAMS = [
    (dict(eta_max=-1), r"eta_max = -1 is out of range: must be a finite number in \[0, 1\]"),
    (dict(eta_max=5), r"eta_max = 5 .*\[0, 1\]"),
    (dict(beta_w=2), r"beta_w = 2 .*\[0, 1\]"),
    (dict(beta_m=1.5), r"beta_m = 1.5 .*\[0, 1\]"),
    (dict(warmup=-3), r"warmup = -3 .*integer >= 0"),
    (dict(kappa=-1), r"kappa = -1 .*>= 0"),
    (dict(tau_pos=2), r"tau_pos = 2 .*\[0, 1\]"),
    (dict(base_interval=2.5), r"base_interval = 2.5 .*an integer >= 1"),  # never truncated to 2
    (dict(krr_interval=0), r"krr_interval = 0 .*>= 1"),
    (dict(gamma=0.0), r"gamma = 0.0 .*> 0"),
    (dict(lambda_krr=float("nan")), r"lambda_krr = nan"),
    (dict(m_min=3.0, m_max=1.0), r"m_min = 3.0 and m_max = 1.0: need m_min <= m_max"),
    (dict(w_min=(0, 0, 0, 2.0), w_max=(2, 1, 1, 1)), r"w_min .* w_max .*index \(3,\)"),
    (dict(u_init=9.0), r"u_init = 9.0 and u_max = 5.0"),
    (dict(w0=(1.0, 0.1)), r"w0 must have 4 entries"),
    # an integer beyond int32 was cast round (np.int64(2**32 + 3) to 3) or raised a bare OverflowError (2**31)
    (dict(agop_interval=np.int64(2**32 + 3)), r"^hyperparameter agop_interval = 4294967299 does not fit int32 \(an "
                                              r"integer hyperparameter is an int32 leaf\): must lie in \[-2\*\*31, "
                                              r"2\*\*31 - 1\]$"),
    (dict(warmup=2**31), r"^hyperparameter warmup = 2147483648 does not fit int32"),
]


@pytest.mark.parametrize("overrides, message", BAD_HPARAMS, ids=[next(iter(o)) for o, _ in BAD_HPARAMS])
def test_bad_hyperparameters_are_refused_with_field_value_and_range(overrides, message):
    with pytest.raises(ValueError, match=message):
        tw.hparams("db", **overrides)


@pytest.mark.parametrize("field", ["capacity", "k_candidates", "n_probes", "base_window", "fast_window", "dim"])
def test_bad_spec_fields_are_refused(field):
    with pytest.raises(ValueError, match=rf"Spec\.{field} = 0 is out of range: must be an integer >= 1"):
        tw.Spec(**{field: 0})
    spec = tw.Spec()
    with pytest.raises(ValueError, match=rf"Spec\.{field} = 0"):
        spec._replace(**{field: 0})  # _replace goes through the same check
    with pytest.raises(ValueError, match=rf"Spec\.{field} = 2.5 must be an integer"):
        tw.Spec(**{field: 2.5})


def test_spec_dtype_and_parts():
    with pytest.raises(ValueError, match=r"Spec\.dtype = 'int8' is not supported"):
        tw.Spec(dtype="int8")
    with pytest.raises(ValueError, match=r"Spec\.scorer must be a tokenworth_jax.scorers.Scorer, got bool"):
        tw.Spec(scorer=True)
    with pytest.raises(ValueError, match=r"Spec\.mode must be a tokenworth_jax.modes.Mode, got str"):
        tw.Spec(mode="tokenworth+")
    with pytest.raises(ValueError, match=r"Spec\.worth_chunk = -1"):
        tw.Spec(worth_chunk=-1)


def test_unknown_preset_method_scorer_or_field_is_a_clear_error():
    with pytest.raises(ValueError, match=r"unknown preset 'foo'; expected one of \['alfworld', 'bigcodebench', "
                                         r"'db', 'kg', 'os'\]"):
        tw.preset("foo")
    with pytest.raises(ValueError, match="unknown preset"):
        tw.Controller.from_preset("foo")
    with pytest.raises(ValueError, match=r"unknown method 'tokenworth-'; expected one of \['tokenworth', "
                                         r"'tokenworth\+'\]"):
        tw.preset("db", method="tokenworth-")
    with pytest.raises(ValueError, match=r"unknown scorer 'fast'; expected one of \['full', 'incremental'\]"):
        tw.preset("db", scorer="fast")
    with pytest.raises(ValueError, match=r"unknown spec field\(s\) \['word_dim'\]"):
        tw.preset("db", spec_overrides={"word_dim": 8})  # the paper's mode has no such shape field
    with pytest.raises(ValueError, match=r"PlusShapes\.word_dim = 0"):
        tw.preset("db", method="tokenworth+", spec_overrides={"word_dim": 0})


def test_a_part_hyperparameter_needs_its_part():
    with pytest.raises(ValueError, match=r"plus_margin is a hyperparameter of the mode 'tokenworth\+', not of this "
                                         r"controller's \('paper'\): pass mode='tokenworth\+'"):
        tw.hparams("db", plus_margin=0.1)
    spec, _ = tw.preset("db")
    with pytest.raises(ValueError, match=r"the mode 'tokenworth\+' needs its hyperparameters \(PlusHParams\)"):
        tw.init(spec._replace(mode=tw.plus_mode()), tw.hparams("db"))
    with pytest.raises(ValueError, match=r"carry PlusHParams in HParams.mode, but the mode 'paper' has none"):
        tw.Controller(spec, tw.hparams("db", mode="tokenworth+"))


def test_stacked_hyperparameters_name_the_configuration():
    good = tw.hparams("db")
    bad = good._replace(eta_max=np.float32(-1.0))
    with pytest.raises(ValueError, match=r"eta_max = -1.0 is out of range"):
        tw.stack_hparams([good, bad])
    stacked = tw.stack_hparams([good, good])
    with pytest.raises(ValueError, match=r"first at index \(1,\)"):
        tw.config.validate_hparams(stacked._replace(tau_pos=np.asarray([0.5, 3.0], np.float32)))
    with pytest.raises(ValueError, match="belong to different controllers"):
        tw.stack_hparams([good, tw.hparams("db", mode="tokenworth+")])


def test_from_state_dict_validates_phase_and_hyperparameters():
    ctl = tw.Controller(*tw.preset("db", spec_overrides=dict(dim=16, capacity=4)))
    ctl.select("a question")
    data = ctl.state_dict()
    phase = next(k for k in data["state"] if k.endswith("progress.phase"))
    with pytest.raises(ValueError, match=r"checkpoint phase must be one of .*got 7"):
        tw.Controller.from_state_dict({**data, "state": {**data["state"], phase: np.int32(7)}})
    hp = dict(data["hparams"], eta_max=np.float32(-5))
    with pytest.raises(ValueError, match=r"eta_max = -5.0 is out of range"):
        tw.Controller.from_state_dict({**data, "hparams": hp})
    with pytest.raises(ValueError, match=r"Spec\.capacity = 0"):
        tw.Controller.from_state_dict({**data, "spec": dict(data["spec"], capacity=0)})
    with pytest.raises(ValueError, match=r"phase 'judged' has reward -1"):
        tw.Controller.from_state_dict({**data, "state": {**data["state"], phase: np.int32(2)}})
    with pytest.raises(ValueError, match=r"the spec's mode 'mine' is not in the preset table: pass it"):
        tw.Controller.from_state_dict({**data, "spec": dict(data["spec"], mode={"name": "mine", "shapes": {}})})
    twin = tw.Controller.from_state_dict(data)  # the untouched checkpoint loads
    assert twin.phase == "selected"


def test_sweep_grid_uses_the_same_check():
    from tokenworth_agent.experiment.sweep import SweepError, configs_from_grid

    with pytest.raises(SweepError, match=r"eta_max = -1.0 is out of range: must be a finite number in \[0, 1\]"):
        configs_from_grid(["eta=-1,0.1"])
    with pytest.raises(SweepError, match=r"beta_m = 1.5"):
        configs_from_grid(["beta_m=0.1,1.5"])
