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
import os
import re
import stat
import struct
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
def _rewrite(src: Path, dst: Path, manifest=None, drop: str | None = None, replace: dict | None = None,
             raw: dict | None = None, redigest: bool = True) -> None:
    """A copy of the save ``src`` with its manifest edited, a member dropped, arrays replaced or members' bytes
    replaced (``raw``); the manifest's digests follow the new bytes unless ``redigest`` is False (an edit that
    only the digest can catch)."""
    with zipfile.ZipFile(src) as z:
        members = {name: z.read(name) for name in z.namelist() if name != drop}
    for name, arr in (replace or {}).items():
        buffer = io.BytesIO()
        np.lib.format.write_array(buffer, arr)
        members[name] = buffer.getvalue()
    members.update(raw or {})
    meta = json.loads(members.pop("manifest.json"))
    if redigest and "digests" in meta:
        meta["digests"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items()}
    if manifest is not None:
        meta = manifest(meta)
    with zipfile.ZipFile(dst, "w") as out:
        out.writestr("manifest.json", json.dumps(meta))
        for name, data in members.items():
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
                      rf"has layout {tw.checkpoint.LAYOUT + 1}, written by tokenworth_jax 9\.0\.0, newer than this "
                      r"version .*: upgrade "
                      r"tokenworth-jax to load it$"),
        "older.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "layout": 0}),
                      r"has layout 0 .*; this version reads layouts 1 and 2 only"),
        "other.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "format": "orbax"}),
                      r"holds format 'orbax', not 'tokenworth_jax\.save'"),
        "missing.npz": (lambda p: _rewrite(good, p, drop="state/.bank.emb.npy"), r"lacks leaf state/\.bank\.emb$"),
        "reshaped.npz": (lambda p: _rewrite(good, p, replace={"state/.bank.u.npy": np.zeros(3, np.float32)}),
                         r"leaf state/\.bank\.u has \(3,\)/float32, expected \(6,\)/float32$"),
        "bad_hp.npz": (lambda p: _rewrite(good, p, replace={"hparams/gamma.npy": np.float32(-1.0)}),
                       r"hyperparameter gamma = -1\.0 is out of range"),
        "no_hp.npz": (lambda p: _rewrite(good, p, drop="hparams/kappa.npy"), r"lacks leaf hparams/kappa$"),
        "pickled.npz": (lambda p: _rewrite(good, p, replace={"state/.bank.u.npy": np.array([object()] * 6)}),
                        r"leaf state/\.bank\.u holds Python objects \(dtype object\), which tw\.load never unpickles"),
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


# ----- refusals: one line naming the file and the leaf for every damaged file; parts by name; a careful save ------
@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    spec, hp = small_setup(jnp.float32)
    path = tmp_path_factory.mktemp("saved") / "good.npz"
    tw.save(path, tw.init(spec, hp), spec, hp)
    return path


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A .npy header claiming ``shape`` (what a damaged or hostile file may say), without its data."""
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def _flipped(src: Path, dst: Path, member: str) -> None:
    """A copy of ``src`` with the last data byte of ``member`` flipped in place (its CRC-32 left as it was)."""
    raw = bytearray(src.read_bytes())
    with zipfile.ZipFile(src) as z:
        info = z.getinfo(member)
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
    raw[info.header_offset + 30 + name_len + extra_len + info.file_size - 1] ^= 0xFF
    dst.write_bytes(bytes(raw))


def _with(values: np.ndarray, at: int, value: float) -> np.ndarray:
    out = values.copy()
    out[at] = value
    return out


U = "state/.bank.u.npy"


def _damaged_files(good: Path) -> dict[str, tuple]:
    """``{file name: (how to make it, the refusal after "tw.load: <path>: ", data read before it is refused)}``."""
    with zipfile.ZipFile(good) as z:
        u = np.lib.format.read_array(io.BytesIO(z.read(U)))
    return {
        "flipped.npz": (lambda p: _flipped(good, p, "state/.bank.emb.npy"),
                        r"leaf state/\.bank\.emb is damaged: its bytes fail their check \(BadZipFile: Bad CRC-32 for "
                        r"file 'state/\.bank\.emb\.npy'\); the file was changed after it was written", True),
        "object.npz": (lambda p: _rewrite(good, p, replace={U: np.array([object()] * 6)}),
                       r"leaf state/\.bank\.u holds Python objects \(dtype object\), which tw\.load never unpickles: not "
                       r"a file tw\.save wrote", False),
        "huge.npz": (lambda p: _rewrite(good, p, raw={U: _npy_header((2**34,)) + bytes(24)}),  # 64 GiB if read
                     r"leaf state/\.bank\.u has \(17179869184,\)/float32, expected \(6,\)/float32", False),
        "large.npz": (lambda p: _rewrite(good, p, raw={U: _npy_header((2**28,)) + bytes(24)}),
                      r"leaf state/\.bank\.u has \(268435456,\)/float32, expected \(6,\)/float32", False),
        "short.npz": (lambda p: _rewrite(good, p, raw={U: _npy_header((6,)) + bytes(8)}),
                      r"leaf state/\.bank\.u holds 136 bytes, its header \(\(6,\)/float32\) says 152: the file was cut "
                      r"short or changed", False),
        "edited.npz": (lambda p: _rewrite(good, p, replace={U: u + 1}, redigest=False),  # a valid CRC, a stale digest
                       r"leaf state/\.bank\.u does not match its SHA-256 digest in the manifest \(its bytes were "
                       r"changed after tw\.save wrote them\)", True),
        "undigested.npz": (lambda p: _rewrite(good, p, lambda m: {**m, "digests": {
                               k: v for k, v in m["digests"].items() if k != U}}),
                           r"leaf state/\.bank\.u does not match its SHA-256 digest in the manifest \(the manifest has "
                           r"none\)", True),
        "no_digests.npz": (lambda p: _rewrite(good, p, lambda m: {k: v for k, v in m.items() if k != "digests"}),
                           r"its manifest \(layout 2\) lacks the digests of its leaves", False),
        "nan.npz": (lambda p: _rewrite(good, p, replace={U: _with(u, 2, np.nan)}),
                    r"leaf state/\.bank\.u holds nan at index \(2,\): tw\.save writes a finite state, so the file was "
                    r"changed", True),
        "inf.npz": (lambda p: _rewrite(good, p, replace={"state/.base.w.npy": np.array([1, np.inf, 0, 0], np.float32)}),
                    r"leaf state/\.base\.w holds inf at index \(1,\): tw\.save writes a finite state, so the "
                    r"file was changed", True),
        "int_eta.npz": (lambda p: _rewrite(good, p, replace={"hparams/eta_max.npy": np.int32(0)}),
                        r"leaf hparams/eta_max has \(\)/int32, expected \(\)/float32", False),
        "f64_gamma.npz": (lambda p: _rewrite(good, p, replace={"hparams/gamma.npy": np.float64(1.0)}),
                          r"leaf hparams/gamma has \(\)/float64, expected \(\)/float32", False),
        "int64_ids.npz": (lambda p: _rewrite(good, p, replace={"state/.bank.ids.npy": np.zeros(6, np.int64)}),
                          r"leaf state/\.bank\.ids has \(6,\)/int64, expected \(6,\)/int32", False),
    }


def test_load_refuses_each_damaged_file_in_one_line_naming_the_file_and_the_leaf(saved, tmp_path):
    for name, (make, pattern, _) in _damaged_files(saved).items():
        path = tmp_path / name
        make(path)
        try:
            refused(rf"^tw\.load: {re.escape(str(path))}: {pattern}$", lambda: tw.load(path))
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
        except Exception as e:  # today's main: BadZipFile, MemoryError, ...
            raise AssertionError(f"{name}: {type(e).__name__}: {str(e)[:300]}") from None
    assert tw.load(saved).spec.capacity == 6


def test_load_checks_every_header_before_it_reads_any_data(saved, tmp_path, monkeypatch):
    """A header claiming another shape or dtype (64 GiB of it), or Python objects, is refused before any array is
    read: nothing is allocated."""
    def no_read(*args, **kwargs):
        raise AssertionError("an array was read before its header was checked")

    cases = {name: case for name, case in _damaged_files(saved).items() if not case[2]}
    assert {"huge.npz", "large.npz", "object.npz", "int_eta.npz"} <= set(cases)
    for name, (make, pattern, _) in cases.items():
        make(tmp_path / name)
    monkeypatch.setattr(np.lib.format, "read_array", no_read)
    monkeypatch.setattr(np, "load", no_read)
    for name, (_, pattern, _) in cases.items():
        try:
            refused(rf"^tw\.load: .*{re.escape(name)}: {pattern}$", lambda: tw.load(tmp_path / name))
        except (AssertionError, MemoryError) as e:
            raise AssertionError(f"{name}: {type(e).__name__}: {str(e)[:300]}") from None


def test_load_names_a_missing_path_and_a_folder(tmp_path):
    nowhere = tmp_path / "nowhere.npz"
    with pytest.raises(FileNotFoundError, match=rf"^tw\.load: {re.escape(str(nowhere))} does not exist$"):
        tw.load(nowhere)
    with pytest.raises(IsADirectoryError, match=rf"^tw\.load: {re.escape(str(tmp_path))} is a folder, not a file "
                                                r"tw\.save wrote$"):
        tw.load(tmp_path)


def test_a_layout_1_file_has_no_digests_and_still_loads_with_its_bytes_checked(saved, tmp_path):
    """Layout 1 (development versions between 0.2.0 and 0.3.0, no digests) is read by 0.3.0, as docs/release.md
    promised; its leaves are checked by their CRC-32 and every other check."""
    old = tmp_path / "old.npz"
    _rewrite(saved, old, lambda m: {**{k: v for k, v in m.items() if k != "digests"}, "layout": 1,
                                    "tokenworth_jax": "0.2.0"})
    assert fingerprint(tw.load(old)) == fingerprint(tw.load(saved))
    _flipped(old, tmp_path / "old_flipped.npz", "state/.bank.emb.npy")
    refused(r"^tw\.load: .*old_flipped\.npz: leaf state/\.bank\.emb is damaged: its bytes fail their check "
            r"\(BadZipFile: Bad CRC-32", lambda: tw.load(tmp_path / "old_flipped.npz"))
    _rewrite(old, tmp_path / "old_nan.npz", replace={U: np.full(6, np.nan, np.float32)})
    refused(r"^tw\.load: .*old_nan\.npz: leaf state/\.bank\.u holds nan at index \(0,\)",
            lambda: tw.load(tmp_path / "old_nan.npz"))


def test_the_manifest_holds_every_leafs_digest_and_names_a_release_that_has_tw_load(saved):
    with zipfile.ZipFile(saved) as z:
        manifest = json.loads(z.read("manifest.json"))
        members = [n for n in z.namelist() if n != "manifest.json"]
        assert manifest["digests"] == {n: hashlib.sha256(z.read(n)).hexdigest() for n in members}
    assert manifest["layout"] == tw.checkpoint.LAYOUT == 2 and tw.checkpoint.READS == (1, 2)
    assert manifest["tokenworth_jax"] == tw.__version__
    assert tuple(int(x) for x in tw.__version__.split(".")[:2]) >= (0, 3)  # 0.3.0 is the first release with tw.load


def test_parts_are_keyed_by_the_parts_own_name(tmp_path):
    spec, hp = small_setup(jnp.float32)
    mine = tw.paper_mode()._replace(name="mine", target=lambda state, y, s_base, hp: y - jnp.tanh(s_base))
    spec_mine = spec._replace(mode=mine)
    tw.save(tmp_path / "mine.npz", tw.init(spec_mine, hp), spec_mine, hp)
    refused(r"^tw\.load: .*mine\.npz: parts\['other'\] is the mode named 'mine': parts are keyed by their own name "
            r"\(parts=\{'mine': \.\.\.\}\)$", lambda: tw.load(tmp_path / "mine.npz", parts={"other": mine}))

    near_spec, near_hp = nearest_setup()
    tw.save(tmp_path / "nearest.npz", tw.init(near_spec, near_hp), near_spec, near_hp)
    refused(r"^tw\.load: .*nearest\.npz: the spec's mode is 'nearest', but parts\['nearest'\] is the mode named 'paper': "
            r"give the mode named 'nearest'$",  # not the advice to do what was done
            lambda: tw.load(tmp_path / "nearest.npz", parts={"nearest": tw.paper_mode()}))
    registry = {"nearest": nearest(history=5), "mine": mine, "paper": tw.paper_mode()}  # unused entries are fine
    assert tw.load(tmp_path / "nearest.npz", parts=registry).spec == near_spec
    assert tw.load(tmp_path / "mine.npz", parts=registry).spec.mode is mine

    fake = tw.paper_mode()._replace(target=lambda state, y, s_base, hp: y)  # named "paper", but not the table's
    refused(r"parts\['paper'\] is not the preset table's mode 'paper', which is what that name means in a checkpoint",
            lambda: tw.load(tmp_path / "nearest.npz", parts={**registry, "paper": fake}))
    scorer = tw.scorers.full()._replace(name="nearest")
    refused(r"parts\['nearest'\] is a Scorer, but 'nearest' is the spec's mode: give a Mode under that name$",
            lambda: tw.load(tmp_path / "nearest.npz", parts={"nearest": scorer}))
    with pytest.raises(TypeError, match=r"^tw\.load: .*nearest\.npz: parts must be a mapping \{name: scorer or mode\}, "
                                        r"got list$"):
        tw.load(tmp_path / "nearest.npz", parts=[nearest(history=5)])
    # the host Controller's checkpoint reads parts by the same rule
    data = tw.Controller(spec_mine, hp).state_dict()
    with pytest.raises(ValueError, match=r"^parts\['other'\] is the mode named 'mine'"):
        tw.Controller.from_state_dict(data, parts={"other": mine})
    assert tw.Controller.from_state_dict(data, parts={"mine": mine}).spec.mode is mine


def _a_state(t: int = 0):
    spec, hp = small_setup(jnp.float32)
    state = tw.init(spec, hp)
    return state._replace(clock=state.clock._replace(t=jnp.int32(t))), spec, hp


def test_save_refuses_to_replace_a_file_unless_told_to(tmp_path):
    state, spec, hp = _a_state()
    path = tmp_path / "s.npz"
    tw.save(path, state, spec, hp)
    before = path.read_bytes()
    later, _, _ = _a_state(t=5)
    with pytest.raises(FileExistsError, match=rf"^tw\.save: {re.escape(str(path))} exists: pass overwrite=True to "
                                              r"replace it$"):
        tw.save(path, later, spec, hp)
    assert path.read_bytes() == before
    tw.save(path, later, spec, hp, overwrite=True)
    assert int(tw.load(path).state.clock.t) == 5
    assert [p.name for p in tmp_path.iterdir()] == ["s.npz"]  # no temporary left


def test_an_interrupted_save_leaves_the_earlier_file_whole(tmp_path, monkeypatch):
    state, spec, hp = _a_state()
    path = tmp_path / "s.npz"
    tw.save(path, state, spec, hp)
    before = path.read_bytes()
    writes = []
    real = zipfile.ZipFile.writestr

    def interrupted(self, name, data, *args, **kwargs):
        writes.append(name)
        if len(writes) == 5:
            raise KeyboardInterrupt
        return real(self, name, data, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "writestr", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tw.save(path, _a_state(t=5)[0], spec, hp, overwrite=True)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["s.npz"]


@pytest.mark.skipif(os.name != "posix", reason="file modes and the umask are POSIX's")
def test_save_gives_a_new_file_the_mode_of_the_users_umask(tmp_path):
    state, spec, hp = _a_state()
    path = tmp_path / "s.npz"
    old = os.umask(0o027)
    try:
        tw.save(path, state, spec, hp)
        assert stat.S_IMODE(path.stat().st_mode) == 0o640
        os.umask(0o022)
        tw.save(tmp_path / "t.npz", state, spec, hp)
        assert stat.S_IMODE((tmp_path / "t.npz").stat().st_mode) == 0o644  # as open(path, "w") makes a new file
        # (mkstemp's was 0600); a replaced file keeps its own mode: test_a_replaced_file_keeps_its_mode
    finally:
        os.umask(old)


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX's")
def test_a_replaced_file_keeps_its_mode(tmp_path):
    """A 0600 file (kept private on purpose) came back 0644 after tw.save(..., overwrite=True)."""
    state, spec, hp = _a_state()
    path = tmp_path / "s.npz"
    old = os.umask(0o022)
    try:
        for mode in (0o600, 0o640):
            tw.save(path, state, spec, hp, overwrite=True)
            os.chmod(path, mode)
            tw.save(path, _a_state(t=3)[0], spec, hp, overwrite=True)
            assert stat.S_IMODE(path.stat().st_mode) == mode and int(tw.load(path).state.clock.t) == 3
    finally:
        os.umask(old)


@pytest.mark.parametrize("overwrite", ["yes", "False", 1, 0, None])
def test_overwrite_must_be_a_bool(tmp_path, overwrite):
    """``overwrite="yes"`` (and "False") replaced the file: any truthy value did."""
    state, spec, hp = _a_state()
    path = tmp_path / "s.npz"
    tw.save(path, state, spec, hp)
    before = path.read_bytes()
    with pytest.raises(TypeError, match=rf"^tw\.save: overwrite must be True or False, got "
                                        rf"{re.escape(repr(overwrite))} \({type(overwrite).__name__}\)$"):
        tw.save(path, _a_state(t=5)[0], spec, hp, overwrite=overwrite)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["s.npz"]
    tw.save(path, _a_state(t=5)[0], spec, hp, overwrite=np.bool_(True))  # NumPy's bool is a bool
    assert int(tw.load(path).state.clock.t) == 5


@pytest.mark.parametrize("path, shown", [(None, "NoneType"), (io.BytesIO(b"PK"), "BytesIO: give the file's name, not "
                                                                                     "an open file"),
                                         (b"s.npz", "bytes")])
def test_save_and_load_refuse_what_is_not_a_path_in_one_line(tmp_path, path, shown):
    """``tw.load(None)`` or a BytesIO raised a bare TypeError of os.fspath's ("expected str, bytes or os.PathLike
    object, not NoneType")."""
    state, spec, hp = _a_state()
    for who, call in (("load", lambda: tw.load(path)), ("save", lambda: tw.save(path, state, spec, hp))):
        with pytest.raises(TypeError, match=rf"^tw\.{who}: path must be a file's path, a str or an os\.PathLike "
                                            rf"\(pathlib\.Path\), got {re.escape(shown)}$"):
            call()
    assert not list(tmp_path.iterdir())


def test_save_names_the_real_target(tmp_path):
    state, spec, hp = _a_state()
    target = tmp_path / "nowhere" / "s.npz"
    with pytest.raises(FileNotFoundError) as info:
        tw.save(target, state, spec, hp)
    assert str(info.value) == f"tw.save: cannot write {target}: the folder {tmp_path / 'nowhere'} does not exist"
    with pytest.raises(IsADirectoryError, match=rf"^tw\.save: {re.escape(str(tmp_path))} is a folder: name the file "
                                                r"to write$"):
        tw.save(tmp_path, state, spec, hp, overwrite=True)
    assert not list(tmp_path.iterdir())


def test_save_refuses_what_load_would_refuse(tmp_path):
    state, spec, hp = _a_state()
    poisoned = state._replace(bank=state.bank._replace(u=state.bank.u.at[2].set(jnp.nan)))
    refused(r"^tw\.save: leaf state/\.bank\.u holds nan at index \(2,\): a state with a NaN or an infinity is not saved",
            lambda: tw.save(tmp_path / "x.npz", poisoned, spec, hp))
    mixed = hp._replace(eta_max=jnp.asarray(0.1, jnp.float16))
    refused(r"^tw\.save: these hyperparameters are not what tw\.hparams builds for this spec \(int32 integers, one float "
            r"dtype\): leaf hparams/eta_max has \(\)/float16, expected \(\)/float32$",
            lambda: tw.save(tmp_path / "x.npz", state, spec, mixed))
    bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16) if jnp.issubdtype(x.dtype, jnp.floating) else x, hp)
    refused(r"^tw\.save: the hyperparameters are bfloat16, which \.npy cannot store",
            lambda: tw.save(tmp_path / "x.npz", state, spec, bf16))
    assert not list(tmp_path.iterdir())
