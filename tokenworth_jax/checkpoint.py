"""Save and restore a pure state with its :class:`~tokenworth_jax.Spec` and :class:`~tokenworth_jax.HParams`.

``tw.save(path, state, spec, hp)`` writes one file; ``tw.load(path)`` returns ``(state, spec, hp)``
(a :class:`Checkpoint`), bit for bit, in this process or any other. A state of C stacked
configurations (``jax.vmap`` over ``tw.stack_hparams``) saves the same way: every leaf keeps its
leading axes.

**The format: a flat ``.npz`` with a JSON manifest**, not an orbax checkpoint. The file is a zip
archive (what ``numpy.savez`` writes) of one ``.npy`` array per leaf, named by its path in the
pytree (``state/.bank.emb``, ``hparams/eta_max``: the flat names of :mod:`tokenworth_jax.config`),
and ``manifest.json``: the format's name and layout, the library version that wrote it, the spec
(its shape fields, and each part by name and shape fields: :func:`tokenworth_jax.presets.describe`)
and the batch shape. Why:

* it needs nothing but NumPy, which the library already needs. orbax-checkpoint is built for
  sharded, asynchronous, multi-host checkpoints of large models (it brings tensorstore and a
  dozen other packages); a controller's state is a few megabytes on one device, saved whole;
* ``.npy`` stores each array's raw bytes with its dtype and shape, so a restore is exact, and
  nothing is pickled: :func:`load` reads with ``allow_pickle=False``, so opening a file from
  elsewhere runs no code, and the file opens without this library (``numpy.load(path)``;
  ``unzip -p path manifest.json`` shows what it holds);
* the layout is the pytree's own (the state's fields, the hyperparameters' flat names), so a
  reader checks every leaf's name, shape and dtype against what the spec makes, and refuses a
  file of another layout in one line.

A user who keeps everything in orbax can save the state and hyperparameters as the pytrees of
arrays they are, with the spec as :func:`tokenworth_jax.presets.describe`'s plain data.

**Parts are saved by name, never as code.** The scorer and the mode are functions, so the file
names them (``{"name": ..., "shapes": {...}}``). :func:`load` rebuilds those of the preset table
by name; any other (your own mode, ``tests/test_custom_mode.py``) is given to it as
``parts={name: value}``, and without it the load is refused, naming the part and the argument.
:func:`save` refuses a part that takes a name of the table but is not the table's value (it would
load as the table's). The file holds ``State.mode`` and ``HParams.mode`` of your own mode like
any other arrays.

**Layouts.** A file says which layout it holds (:data:`LAYOUT`); this version reads its own and
refuses another (a newer one: upgrade the library) in one line. The layouts are listed in
docs/release.md. The host :class:`~tokenworth_jax.Controller` has its own checkpoint
(``state_dict``), which also keeps the memories' payloads.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile
from typing import Any, Mapping, NamedTuple

import jax
import numpy as np

from . import _doc
from ._version import __version__
from .config import HParams, flatten, hparams_from_arrays, validate_hparams
from .controller import Spec, State, init
from .presets import MODES, SCORERS, describe, spec_from_dict
from .pytree import from_numpy, to_numpy

FORMAT = "tokenworth_jax.save"  #: the manifest's ``"format"``: a pure state with its spec and hyperparameters
LAYOUT = 1  #: the layout this version writes and reads (docs/release.md lists them)
MANIFEST = "manifest.json"
STATE, HPARAMS = "state/", "hparams/"  # the prefixes of the arrays' names

__all__ = ["Checkpoint", "FORMAT", "LAYOUT", "load", "save"]


class Checkpoint(NamedTuple):
    """What :func:`load` returns; unpacks as ``state, spec, hp = tw.load(path)``."""

    state: State
    spec: Spec
    hp: HParams


_doc.fields(
    Checkpoint,
    state="State: the saved state, every leaf as it was saved (C stacked configurations keep their axis).",
    spec="Spec: the spec it was saved with, its parts rebuilt by name.",
    hp="HParams: its hyperparameters, validated as ``tw.hparams`` validates them.",
)


def save(path: str | os.PathLike[str], state: State, spec: Spec, hp: HParams) -> None:
    """Write ``state`` with ``spec`` and ``hp`` to ``path`` (an ``.npz`` file; the name is used as given).

    ``state`` and ``hp`` are one configuration, or C stacked ones (the same leading axes on both). The
    file is written to a temporary name beside ``path`` and moved into place, so an interrupted save
    leaves any earlier file whole. Refused (ValueError or TypeError, one line, nothing written): a state
    that is not one ``spec`` makes, hyperparameters not built for its parts, a part that takes a name of
    the preset table but is not the table's value.
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"tw.save: spec must be a tokenworth_jax.Spec, got {type(spec).__name__}")
    if not isinstance(state, State):
        raise TypeError(f"tw.save: state must be a tokenworth_jax.State, got {type(state).__name__}")
    validate_hparams(hp, spec.parts)
    for slot, table in (("scorer", SCORERS), ("mode", MODES)):
        part = getattr(spec, slot)
        if part.name in table and table[part.name](**part.shapes._asdict()) != part:
            raise ValueError(f"tw.save: the {slot} named {part.name!r} is not the preset table's {part.name!r} (it would "
                             f"load as that one): give your {slot} a name of its own")
    flat = to_numpy(state)
    try:  # the state is one this spec makes for these hyperparameters: what load will rebuild
        from_numpy(_template(spec, hp), flat)
    except ValueError as e:
        raise ValueError(f"tw.save: this state is not one the spec makes for these hyperparameters: {e}") from None
    manifest = {"format": FORMAT, "layout": LAYOUT, "tokenworth_jax": __version__, "spec": describe(spec),
                "batch_shape": list(np.shape(hp.gamma))}
    arrays = {STATE + k: v for k, v in flat.items()}
    arrays.update({HPARAMS + k: np.asarray(v) for k, v in flatten(hp, spec.parts).items()})
    target = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(target)))
    try:
        with os.fdopen(fd, "wb") as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as z:
            z.writestr(MANIFEST, json.dumps(manifest, indent=1, default=_plain))
            for name, arr in arrays.items():
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.asarray(arr), allow_pickle=False)
                z.writestr(name + ".npy", buffer.getvalue())
        os.replace(tmp, target)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path: str | os.PathLike[str], *, parts: Mapping[str, Any] | None = None) -> Checkpoint:
    """The state, spec and hyperparameters :func:`save` wrote to ``path``, bit for bit.

    ``parts`` (``{name: value}``) supplies a scorer or mode the preset table does not know (saved by
    name). The arrays are placed on JAX's default device. Refused (ValueError, one line): a file that is
    not a save of this format, a newer or older layout, a part not in the table and not in ``parts``, a
    leaf missing or of another shape or dtype than the spec makes, hyperparameters out of range, a
    float64 spec while JAX's 64-bit mode is off.
    """
    where = os.fspath(path)
    if not zipfile.is_zipfile(where):
        raise ValueError(f"tw.load: {where} is not a tokenworth_jax save file (not an .npz archive)")
    with zipfile.ZipFile(where) as z:
        names = set(z.namelist())
        if MANIFEST not in names:
            raise ValueError(f"tw.load: {where} has no {MANIFEST}: it is an .npz archive, but not one tw.save wrote")
        try:
            manifest = json.loads(z.read(MANIFEST))
        except ValueError:
            raise ValueError(f"tw.load: {where}: its {MANIFEST} is not valid JSON") from None
        _check_manifest(manifest, where)
        arrays = {}
        for name in sorted(names - {MANIFEST}):
            if not name.endswith(".npy") or not name.startswith((STATE, HPARAMS)):
                raise ValueError(f"tw.load: {where} holds {name!r}, which layout {LAYOUT} does not know")
            with z.open(name) as f:
                arrays[name[:-len(".npy")]] = np.lib.format.read_array(f, allow_pickle=False)
    try:  # each step refuses what it cannot rebuild, naming it
        spec = spec_from_dict(manifest["spec"], parts)
        hp = hparams_from_arrays({k[len(HPARAMS):]: v for k, v in arrays.items() if k.startswith(HPARAMS)}, spec.parts)
        if list(np.shape(hp.gamma)) != manifest["batch_shape"]:
            raise ValueError(f"its hyperparameters have batch shape {np.shape(hp.gamma)}, its manifest says "
                             f"{tuple(manifest['batch_shape'])}")
        state = from_numpy(_template(spec, hp), {k[len(STATE):]: v for k, v in arrays.items() if k.startswith(STATE)})
    except ValueError as e:
        raise ValueError(f"tw.load: {where}: {e}") from None
    return Checkpoint(state=state, spec=spec, hp=hp)


def _check_manifest(manifest: Any, where: str) -> None:
    """The manifest is this format's, of the layout this version reads (ValueError, one line, if not)."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        got = manifest.get("format") if isinstance(manifest, dict) else None
        raise ValueError(f"tw.load: {where} holds format {got!r}, not {FORMAT!r} (a pure state saved by tw.save)")
    layout, version = manifest.get("layout"), manifest.get("tokenworth_jax", "?")
    if isinstance(layout, int) and layout > LAYOUT:
        raise ValueError(f"tw.load: {where} has layout {layout}, written by tokenworth_jax {version}, newer than this "
                         f"version ({__version__}, which reads layout {LAYOUT}): upgrade tokenworth-jax to load it")
    if layout != LAYOUT:
        raise ValueError(f"tw.load: {where} has layout {layout!r} (tokenworth_jax {version}); this version reads layout "
                         f"{LAYOUT} only: load it with the release that wrote it")
    if not isinstance(manifest.get("spec"), dict) or not isinstance(manifest.get("batch_shape"), list):
        raise ValueError(f"tw.load: {where}: its manifest lacks the spec or the batch shape")


def _plain(value: Any) -> Any:
    """A NumPy scalar in the spec (``Spec(capacity=np.int64(8))`` is valid) as the Python number JSON holds."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"tw.save: the spec holds {value!r} ({type(value).__name__}), which its JSON manifest cannot hold")


def _template(spec: Spec, hp: HParams) -> State:
    """The shapes and dtypes of the state ``spec`` makes for ``hp`` (stacked: with ``hp``'s leading axes), traced
    only (nothing is computed or compiled)."""
    fn: Any = lambda h: init(spec, h)  # noqa: E731
    for _ in range(np.ndim(hp.gamma)):  # one scalar per configuration: its axes are the batch axes
        fn = jax.vmap(fn)
    template: State = jax.eval_shape(fn, hp)
    return template
