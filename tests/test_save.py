"""Save and restore a pure state with its spec and hyperparameters (``tw.save`` / ``tw.load``):

* exact: every leaf's bytes, dtype and shape, in this process and in a fresh one, which then continues the
  stream to the same decisions and state as the process that saved;
* a batch of configurations (``jax.vmap`` / ``tw.run_batched``) and a float64 spec save the same way;
* a custom mode (tests/test_custom_mode.py's, and one made of lambdas) is saved by name, never pickled: its load
  needs ``parts=``, and is refused without it; a part that takes a table name but is not the table's is refused;
* a file of another format or layout, a newer layout, a missing or reshaped leaf: one-line refusals.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import tokenworth_jax as tw

from tests.controller_helpers import clustered_stream, precision, small_setup
from tests.test_custom_mode import nearest, setup as nearest_setup, stream as nearest_stream

pytestmark = pytest.mark.library  # imports nothing of the harness: runs in the library's own venvs too

REPO = Path(__file__).resolve().parents[1]
T = 60


def stream(spec: tw.Spec, f=jnp.float32, seed: int = 21) -> tw.Event:
    q, m, r = clustered_stream(seed=seed, T=2 * T, dim=spec.dim)
    return tw.Event(jnp.asarray(q, f), jnp.asarray(r, jnp.int32), jnp.asarray(m, f), jnp.arange(2 * T, dtype=jnp.int32))


def first(events: tw.Event) -> tw.Event:
    return jax.tree_util.tree_map(lambda x: x[:T], events)


def second(events: tw.Event) -> tw.Event:
    return jax.tree_util.tree_map(lambda x: x[T:], events)


def fingerprint(tree) -> list[tuple[str, str, tuple, str]]:
    """(path, dtype, shape, sha256 of the bytes) of every leaf: equal fingerprints are equal bits."""
    return [(jax.tree_util.keystr(p), str(np.asarray(x).dtype), np.shape(x), hashlib.sha256(np.asarray(x).tobytes())
             .hexdigest()) for p, x in jax.tree_util.tree_leaves_with_path(tree)]


def refused(pattern: str, call) -> str:
    with pytest.raises(ValueError, match=pattern) as info:
        call()
    assert "\n" not in str(info.value), str(info.value)
    return str(info.value)


# ----- exact ---------------------------------------------------------------------------------------------------------
def test_a_saved_state_restores_bit_for_bit_here_and_in_a_fresh_process(tmp_path):
    spec, hp = small_setup(jnp.float32, eta_max=0.25)
    events = stream(spec)
    state, _ = tw.run(tw.init(spec, hp), first(events), hp, spec)
    assert int(state.residual.n_fits) > 0 and bool(state.bank.valid.all())  # a state with something in every part
    path = tmp_path / "state.npz"
    tw.save(path, state, spec, hp)

    loaded = tw.load(path)
    assert isinstance(loaded, tw.Checkpoint) and loaded.spec == spec
    assert fingerprint(loaded.state) == fingerprint(state) and fingerprint(loaded.hp) == fingerprint(hp)
    final, out = tw.run(state, second(events), hp, spec)

    child = textwrap.dedent("""
        import json, sys
        import numpy as np
        import tokenworth_jax as tw
        from tests.test_save import fingerprint, second, stream
        state, spec, hp = tw.load(sys.argv[1])
        final, out = tw.run(state, second(stream(spec)), hp, spec)
        print(json.dumps(dict(state=fingerprint(state), hp=fingerprint(hp), final=fingerprint(final),
                              codes=np.asarray(out.decision.code).tolist(),
                              chosen=np.asarray(out.selection.chosen).tolist(), spec=tw.presets.describe(spec))))
    """)
    result = subprocess.run([sys.executable, "-c", child, str(path)], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    got = json.loads(result.stdout.strip().splitlines()[-1])
    as_lists = lambda fp: [[p, d, list(s), h] for p, d, s, h in fp]  # noqa: E731 (JSON has no tuples)
    assert got["state"] == as_lists(fingerprint(state)) and got["hp"] == as_lists(fingerprint(hp))
    assert got["spec"] == json.loads(json.dumps(tw.presets.describe(spec)))
    # the fresh process continues the stream exactly as this one does
    assert got["codes"] == np.asarray(out.decision.code).tolist()
    assert got["chosen"] == np.asarray(out.selection.chosen).tolist()
    assert got["final"] == as_lists(fingerprint(final))


def test_a_batch_of_configurations_saves_and_continues(tmp_path):
    spec, _ = small_setup(jnp.float32)
    hps = tw.stack_hparams([small_setup(jnp.float32, eta_max=e, gamma=g)[1] for e, g in ((0.05, 1.0), (0.3, 2.0),
                                                                                        (0.15, 0.5))])
    events = stream(spec, seed=22)
    states, _ = tw.run_batched(jax.vmap(functools.partial(tw.init, spec))(hps), first(events), hps, spec)
    path = tmp_path / "batch.npz"
    tw.save(path, states, spec, hps)
    state, spec2, hps2 = tw.load(path)
    assert state.bank.emb.shape == (3, spec.capacity, spec.dim) and hps2.eta_max.shape == (3,)
    assert fingerprint(state) == fingerprint(states) and fingerprint(hps2) == fingerprint(hps) and spec2 == spec
    want = tw.run_batched(states, second(events), hps, spec)
    got = jax.jit(jax.vmap(lambda s, h: tw.run(s, second(events), h, spec)))(state, hps2)
    np.testing.assert_array_equal(np.asarray(got[1].decision.code), np.asarray(want[1].decision.code))
    np.testing.assert_array_equal(np.asarray(got[1].selection.chosen), np.asarray(want[1].selection.chosen))
    manifest = json.loads(zipfile.ZipFile(path).read("manifest.json"))
    assert manifest["batch_shape"] == [3] and manifest["format"] == tw.checkpoint.FORMAT


def test_a_float64_state_saves_exactly_and_needs_x64_to_load(tmp_path):
    path = tmp_path / "f64.npz"
    with precision("float64") as f:
        spec, hp = small_setup(f)
        state, _ = tw.run(tw.init(spec, hp), first(stream(spec, f)), hp, spec)
        tw.save(path, state, spec, hp)
        loaded = tw.load(path)
        assert loaded.state.bank.emb.dtype == jnp.float64
        assert fingerprint(loaded.state) == fingerprint(state) and fingerprint(loaded.hp) == fingerprint(hp)
    refused(r"^tw\.load: .*f64\.npz: Spec\.dtype = float64 needs JAX's 64-bit mode, which is off", lambda: tw.load(path))


def test_a_spec_with_numpy_integers_saves(tmp_path):
    spec, hp = small_setup(jnp.float32)
    spec = spec._replace(capacity=np.int64(spec.capacity), dim=np.int32(spec.dim))
    state = tw.init(spec, hp)
    tw.save(tmp_path / "np.npz", state, spec, hp)
    loaded = tw.load(tmp_path / "np.npz")
    assert loaded.spec == spec and fingerprint(loaded.state) == fingerprint(state)


def test_a_host_controllers_state_saves_as_a_pure_state(tmp_path):
    ctl = tw.Controller(*tw.preset("db", spec_overrides=dict(dim=32, capacity=4)))
    for i in range(3):
        ctl.select(f"how many rows in table {i}")
        ctl.observe(1)
        ctl.offer(f"SELECT COUNT(*) FROM t{i}")
    tw.save(tmp_path / "ctl.npz", ctl.state, ctl.spec, ctl.hp)
    state, spec, hp = tw.load(tmp_path / "ctl.npz")
    assert fingerprint(state) == fingerprint(ctl.state) and spec == ctl.spec


# ----- parts by name, never pickled ----------------------------------------------------------------------------------
def test_a_custom_mode_is_saved_by_name_and_loads_with_parts(tmp_path):
    spec, hp = nearest_setup(nearest_min_cosine=0.2)
    events, _ = nearest_stream(T=30)
    state, _ = tw.run(tw.init(spec, hp), events, hp, spec)
    path = tmp_path / "nearest.npz"
    tw.save(path, state, spec, hp)
    with zipfile.ZipFile(path) as z:
        manifest = json.loads(z.read("manifest.json"))
        assert all(n.endswith(".npy") for n in z.namelist() if n != "manifest.json")  # arrays only: no code
        assert "state/.mode.n_injected.npy" in z.namelist() and "hparams/nearest_min_cosine.npy" in z.namelist()
    assert manifest["spec"]["mode"] == {"name": "nearest", "shapes": {"history": 5}}
    refused(r"^tw\.load: .*nearest\.npz: the spec's mode 'nearest' is not in the preset table: pass it "
            r"\(parts=\{'nearest': your_mode\}\)$", lambda: tw.load(path))
    loaded = tw.load(path, parts={"nearest": nearest(history=5)})
    assert loaded.spec == spec and fingerprint(loaded.state) == fingerprint(state)
    assert fingerprint(loaded.hp) == fingerprint(hp)
    refused(r"the mode 'nearest' given has shapes \{'history': 3\}, the spec says \{'history': 5\}",
            lambda: tw.load(path, parts={"nearest": nearest(history=3)}))


def test_a_mode_made_of_lambdas_saves_where_pickle_fails(tmp_path):
    """The issue's case: a Spec whose mode holds a lambda raised PicklingError."""
    base = tw.paper_mode()
    mine = base._replace(name="mine", target=lambda state, y, s_base, hp: y - jnp.tanh(s_base))
    spec, hp = small_setup(jnp.float32)
    spec = spec._replace(mode=mine)
    state, _ = tw.run(tw.init(spec, hp), first(stream(spec)), hp, spec)
    tw.save(tmp_path / "mine.npz", state, spec, hp)
    loaded = tw.load(tmp_path / "mine.npz", parts={"mine": mine})
    assert loaded.spec.mode is mine and fingerprint(loaded.state) == fingerprint(state)


def test_a_part_with_a_table_name_that_is_not_the_tables_is_refused(tmp_path):
    spec, hp = small_setup(jnp.float32)
    fake = tw.paper_mode()._replace(target=lambda state, y, s_base, hp: y)  # still named "paper"
    state = tw.init(spec._replace(mode=fake), hp)
    refused(r"^tw\.save: the mode named 'paper' is not the preset table's 'paper' .*: give your mode a name of its own$",
            lambda: tw.save(tmp_path / "x.npz", state, spec._replace(mode=fake), hp))
    assert not (tmp_path / "x.npz").exists()


# ----- refusals ------------------------------------------------------------------------------------------------------
def _rewrite(src: Path, dst: Path, manifest=None, drop: str | None = None, replace: dict | None = None) -> None:
    """A copy of the save ``src`` with its manifest edited, a member dropped, or arrays replaced."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for name in z.namelist():
            if name == drop:
                continue
            data = z.read(name)
            if name == "manifest.json" and manifest is not None:
                data = json.dumps(manifest(json.loads(data))).encode()
            if replace and name in replace:
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, replace[name])
                data = buffer.getvalue()
            out.writestr(name, data)


def test_a_file_of_another_layout_or_a_newer_version_is_refused_in_one_line(tmp_path):
    spec, hp = small_setup(jnp.float32)
    good = tmp_path / "good.npz"
    tw.save(good, tw.init(spec, hp), spec, hp)
    cases = {
        "text.npz": (lambda p: p.write_text("not an archive"), r"is not a tokenworth_jax save file \(not an \.npz"),
        "plain.npz": (lambda p: np.savez(p, a=np.zeros(3)), r"has no manifest\.json: it is an \.npz archive, but not one "
                                                            r"tw\.save wrote"),
        "newer.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "layout": tw.checkpoint.LAYOUT + 1,
                                                             "tokenworth_jax": "9.0.0"}),
                      r"has layout 2, written by tokenworth_jax 9\.0\.0, newer than this version .*: upgrade "
                      r"tokenworth-jax to load it$"),
        "older.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "layout": 0}),
                      r"has layout 0 .*; this version reads layout 1 only"),
        "other.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "format": "orbax"}),
                      r"holds format 'orbax', not 'tokenworth_jax\.save'"),
        "missing.npz": (lambda p: _rewrite(good, p, drop="state/.bank.emb.npy"), r"lacks leaf \.bank\.emb"),
        "reshaped.npz": (lambda p: _rewrite(good, p, replace={"state/.bank.u.npy": np.zeros(3, np.float32)}),
                         r"leaf \.bank\.u has \(3,\)/float32, expected \(6,\)/float32"),
        "bad_hp.npz": (lambda p: _rewrite(good, p, replace={"hparams/gamma.npy": np.float32(-1.0)}),
                       r"hyperparameter gamma = -1\.0 is out of range"),
        "no_hp.npz": (lambda p: _rewrite(good, p, drop="hparams/kappa.npy"), r"hyperparameters: missing \['kappa'\]"),
        "pickled.npz": (lambda p: _rewrite(good, p, replace={"state/.bank.u.npy": np.array([object()] * 6)}),
                        r"pickled data|allow_pickle"),
    }
    for name, (make, pattern) in cases.items():
        path = tmp_path / name
        make(path)
        try:
            refused(rf"^tw\.load: .*{pattern}", lambda: tw.load(path))
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
    assert tw.load(good).spec == spec


def test_save_refuses_a_state_the_spec_does_not_make(tmp_path):
    spec, hp = small_setup(jnp.float32)
    hps = tw.stack_hparams([hp, hp])
    refused(r"^tw\.save: this state is not one the spec makes .*\.bank\.emb has \(6, 24\)/float32, expected "
            r"\(2, 6, 24\)/float32", lambda: tw.save(tmp_path / "x.npz", tw.init(spec, hp), spec, hps))
    refused(r"^tw\.save: this state is not one the spec makes", lambda: tw.save(
        tmp_path / "x.npz", tw.init(spec, hp), spec._replace(capacity=7), hp))
    with pytest.raises(TypeError, match=r"^tw\.save: spec must be a tokenworth_jax\.Spec"):
        tw.save(tmp_path / "x.npz", tw.init(spec, hp), dict(spec._asdict()), hp)
    assert not (tmp_path / "x.npz").exists() and not list(tmp_path.iterdir())  # nothing written, no temporary left
